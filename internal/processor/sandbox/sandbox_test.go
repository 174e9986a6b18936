package sandbox_test

import (
	"testing"

	"paysvc/internal/payments"
	"paysvc/internal/processor"
	"paysvc/internal/processor/processortest"
	"paysvc/internal/processor/sandbox"
	"paysvc/internal/testenv"
)

func TestContract(t *testing.T) {
	db := testenv.DB(t)
	processortest.Run(t, processortest.Harness{
		New: func(t *testing.T) processor.Processor { return sandbox.New(db, "http://checkout.test") },
		Account: func(t *testing.T, live bool) processor.Account {
			id := payments.NewID("mch_")
			if _, err := db.Exec(`INSERT INTO merchants (id, name, email, plan) VALUES ($1, 'Contract shop', '', 'free')`, id); err != nil {
				t.Fatal(err)
			}
			return processor.Account{MerchantID: id, Live: live}
		},
		Unavailable: func(t *testing.T) processor.Processor {
			closed := testenv.DB(t)
			closed.Close() // every query fails
			return sandbox.New(closed, "http://checkout.test")
		},
		WinningEvidence: sandbox.EvidenceWinning,
		LosingEvidence:  sandbox.EvidenceLosing,
		NewID:           payments.NewID,
	})
}
