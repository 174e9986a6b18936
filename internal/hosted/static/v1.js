/* Sandbox processor client, v1. Usage:
 *   var sandbox = Sandbox('pk_test_…');
 *   sandbox.confirmCardPayment(clientSecret, {number: '4242424242424242'})
 *     .then(function (result) { result.error ? show(result.error.message) : done(result.paymentIntent.status); });
 * Only the publishable key and the client secret reach the browser; the API key stays on your server.
 */
(function () {
  'use strict';
  var script = document.currentScript;
  var origin = script ? new URL(script.src).origin : '';

  function Sandbox(publishableKey, options) {
    if (!(this instanceof Sandbox)) return new Sandbox(publishableKey, options);
    if (!/^pk_(test|live)_/.test(publishableKey || '')) throw new Error('Sandbox: a publishable key (pk_…) is required');
    this.publishableKey = publishableKey;
    this.baseUrl = (options && options.baseUrl) || origin;
  }

  Sandbox.prototype.confirmCardPayment = function (clientSecret, card) {
    var id = String(clientSecret || '').split('_secret_')[0];
    return fetch(this.baseUrl + '/sandbox/v1/payment_intents/' + encodeURIComponent(id) + '/confirm', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({
        publishable_key: this.publishableKey,
        client_secret: clientSecret,
        card_number: String((card && card.number) || '').replace(/[\s-]/g, '')
      })
    }).then(function (res) {
      return res.json().then(function (body) {
        if (body.error) return { error: body.error, paymentIntent: body.id ? { id: body.id, status: body.status } : undefined };
        return { paymentIntent: body };
      });
    }, function (err) {
      return { error: { code: 'network_error', message: String(err) } };
    });
  };

  window.Sandbox = Sandbox;
})();
