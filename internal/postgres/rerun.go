package postgres

import (
	"errors"
	"strings"

	"github.com/lib/pq"
)

// A statement outside a transaction can run twice. When the connection
// breaks after PostgreSQL committed a statement but before its reply
// arrived (a pooler restarted, a TCP reset), lib/pq reports the closed
// connection as driver.ErrBadConn, and database/sql, which cannot tell that
// from an idle connection the server had closed before the statement went
// out, runs the statement again on another connection. (A statement in a
// transaction is not run again: the transaction is gone with its
// connection, and its caller gets the error.)
//
// So every write here that runs alone is one whose second run is harmless
// and answers as the first would have:
//   - a creation's row has an id minted for it (payments.NewID: 143 random
//     bits), so its second run can only meet its own row, on the primary
//     key, and writtenBefore reports that as the creation done;
//   - an update sets values, it does not add to them, and one whose
//     condition the first run changed (a deletion, a rotation) still
//     matches the row the first run left (DeleteCustomer,
//     RotateEndpointSecret);
//   - a write that adds (the sandbox clock's advance) runs in a
//     transaction, where a lost reply is an error, not a second run.

// writtenBefore reports whether err is a creation meeting its own row: a
// unique violation of one of the primary keys named, each of which the
// statement fills with ids minted for it.
func writtenBefore(err error, pkeys ...string) bool {
	for _, k := range pkeys {
		if isUniqueViolation(err, k) {
			return true
		}
	}
	return false
}

// attemptWrittenBefore is writtenBefore for a successful delivery's
// statement (RecordAttempt): its second run finds the delivery no longer
// pending, and meets its attempt on the key of the partition that holds it,
// whose name varies (webhook_attempts_20261130_pkey, ..._default_pkey1).
// The attempt's id is the only key the statement fills.
func attemptWrittenBefore(err error) bool {
	var pqErr *pq.Error
	return errors.As(err, &pqErr) && pqErr.Code == "23505" && strings.HasPrefix(pqErr.Table, "webhook_attempts")
}
