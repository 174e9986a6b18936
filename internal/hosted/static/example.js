(function () {
  'use strict';
  var params = new URLSearchParams(location.hash.slice(1));
  ['publishable_key', 'client_secret'].forEach(function (name) {
    if (params.get(name)) document.getElementById(name).value = params.get(name);
  });
  document.getElementById('pay-form').addEventListener('submit', function (e) {
    e.preventDefault();
    var result = document.getElementById('result');
    result.textContent = 'Processing…';
    var sandbox = Sandbox(document.getElementById('publishable_key').value.trim());
    sandbox.confirmCardPayment(document.getElementById('client_secret').value.trim(), {
      number: document.getElementById('card_number').value
    }).then(function (r) {
      result.textContent = r.error ? 'Payment failed: ' + r.error.message : 'Payment ' + r.paymentIntent.status;
      result.dataset.status = r.error ? (r.error.decline_code || r.error.code) : r.paymentIntent.status;
    });
  });
})();
