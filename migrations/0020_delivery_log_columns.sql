-- +goose Up
-- An endpoint's delivery log reads its page from webhook_deliveries alone
-- (postgres Store.EndpointDeliveries). It joined each delivery to its
-- event, for the type, and to its last attempt, for the start of the
-- response. With those joins the planner's estimate of the page's rows
-- decided whether a prepared page kept its generic plan, and for an
-- endpoint it estimated at a few rows (most endpoints: not among the
-- column's most common values) it planned every call afresh, 2.4 ms of
-- planning across the partitions of three tables, then sorted every
-- delivery of the endpoint (deploy/bench/results.md, "The delivery log's
-- page is planned on every call for a small endpoint").
--
-- event_type is the event's type, written with the delivery; an event's
-- type never changes. last_response_body is the start of the last
-- attempt's response, written with the attempt ('' for none); NULL while
-- no attempt was made.
--
-- Rows written before this migration (or by the previous version while
-- it still runs) have neither: the page reads those from their event and
-- attempts, as before, in a second statement (postgres legacyDeliveries).
-- They leave with their partitions (event retention). No backfill: an
-- UPDATE of every delivery would rewrite the table and hold each row it
-- reaches from the workers recording attempts until it commits.
--
-- Both columns are nullable, so the ALTER changes only the catalog.
ALTER TABLE webhook_deliveries
    ADD COLUMN event_type         text,
    ADD COLUMN last_response_body text;

-- +goose Down
ALTER TABLE webhook_deliveries
    DROP COLUMN event_type,
    DROP COLUMN last_response_body;
