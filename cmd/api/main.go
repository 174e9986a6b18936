// Command api serves the public REST API and the admin listener, and is the
// admin CLI: migrate, partitions maintain, merchant
// create/unsuspend/stripe-account, key create/revoke, dashboard user
// create, sandbox payout, payout-bank and advance-clock.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"paysvc/internal/admin"
	"paysvc/internal/app"
	"paysvc/internal/clientaddr"
	"paysvc/internal/dashboard"
	"paysvc/internal/hosted"
	"paysvc/internal/httpapi"
	"paysvc/internal/payments"
	"paysvc/internal/postgres"
	"paysvc/internal/processor"
	"paysvc/internal/processor/sandbox"
	"paysvc/internal/processor/stripe"
	"paysvc/internal/ratelimit"
	"paysvc/internal/secrets"
)

const usage = `usage:
  api [serve]
  api migrate
  api partitions maintain
  api merchant create --name NAME [--email EMAIL] [--plan free|brand|pro]
  api merchant unsuspend --merchant ID
  api merchant stripe-account --merchant ID --mode test|live --account acct_…
  api key create --merchant ID --mode test|live [--expires-in DURATION]
  api key revoke --id KEY_ID
  api user create --merchant ID --email EMAIL [--role admin|viewer] --password-stdin
  api sandbox payout --merchant ID --mode test|live [--currency CUR]
  api sandbox advance-clock --merchant ID --mode test|live --by DURATION (e.g. 90m, 36h, 30d)
  api sandbox payout-bank --merchant ID --mode test|live --bank-name NAME --routing-number N --account-number-stdin
  api listen --key svc_test_… --forward-to http://localhost:3000/hooks [--events TYPE,…] [--api URL]
             [--interval 5s] [--state-dir DIR]`

// crashHook is nil in the real binary; the crash tests of this package set
// it in the API process they run, to kill it at a point of an idempotent
// request (httpapi.Deps.Crash).
var crashHook func(point string)

// stdin is where --password-stdin and --account-number-stdin read; tests
// set their own.
var stdin io.Reader = os.Stdin

// exitLimit is the exit status when a key-creation limit refuses a key.
const exitLimit = 3

func main() {
	ctx, stop := app.SignalContext()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches a command line and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmd := strings.Join(head(args, 2), " ")
	var err error
	switch {
	case len(args) == 0 || args[0] == "serve":
		err = serve(ctx)
	case args[0] == "migrate":
		err = migrate(ctx, stdout)
	case args[0] == "listen":
		err = listen(ctx, args[1:], stdout)
	case cmd == "merchant create", cmd == "merchant unsuspend", cmd == "merchant stripe-account", cmd == "key create", cmd == "key revoke",
		cmd == "user create", cmd == "sandbox payout", cmd == "sandbox advance-clock", cmd == "sandbox payout-bank",
		cmd == "partitions maintain":
		err = admin_(ctx, cmd, args[2:], stdout)
	case args[0] == "help" || args[0] == "-h" || args[0] == "--help":
		fmt.Fprintln(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "unknown command %q\n%s\n", strings.Join(args, " "), usage)
		return 2
	}
	if err == nil || errors.Is(err, flag.ErrHelp) { // a subcommand's -h printed its usage
		return 0
	}
	var pe *payments.Error
	if errors.As(err, &pe) && (pe.Code == payments.KeyCreationRateExceeded || pe.Code == payments.MaxKeysReached) {
		_ = json.NewEncoder(stdout).Encode(map[string]any{"error": map[string]any{"code": pe.Code, "message": pe.Msg}})
		fmt.Fprintln(stderr, pe.Msg)
		return exitLimit
	}
	if errors.As(err, &pe) {
		fmt.Fprintln(stderr, "error:", pe.Msg)
	} else {
		fmt.Fprintln(stderr, "error:", err)
	}
	return 1
}

// printUsage prints cmd's lines of usage (a subcommand's -h): its line
// and the indented lines continuing it.
func printUsage(w io.Writer, cmd string) {
	in := false
	for _, line := range strings.Split(usage, "\n") {
		switch {
		case line == "  api "+cmd || strings.HasPrefix(line, "  api "+cmd+" "):
			in = true
			fmt.Fprintln(w, "usage:"+line[1:])
		case in && strings.HasPrefix(line, "    "): // continues it, aligned below
			fmt.Fprintln(w, "     "+line)
		default:
			in = false
		}
	}
}

func head(s []string, n int) []string {
	if len(s) < n {
		return s
	}
	return s[:n]
}

// apiGCPercent is the API's GOGC when the environment sets none. A request
// allocates about 15 KB that is garbage when it ends and the live heap is a
// few MB, so the default 100 collected every few ms under load; 400 makes
// it a quarter as often for a heap of a few tens of MB. GOGC and GOMEMLIMIT
// in the environment win.
const apiGCPercent = 400

func serve(ctx context.Context) error {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(apiGCPercent)
	}
	env, err := app.Setup(ctx, "api", 64)
	if err != nil {
		return err
	}
	defer env.Close()
	d, err := env.Domain()
	if err != nil {
		return err
	}
	_, closeQueue := env.Enqueuer()
	defer closeQueue()
	limiter := ratelimit.New(env.Redis, env.Config.RateLimitPerHour)
	clients, err := clientaddr.New(env.Config.TrustedProxies)
	if err != nil {
		return err
	}
	deps := httpapi.Deps{
		Service: d.Service,
		Store:   env.Store,
		Limiter: limiter,
		Log:     env.Log,
		Secrets: d.Secrets,
		Crash:   crashHook,
		Clients: clients,
	}
	if n := env.Config.UnknownKeysPerMinute; n > 0 {
		deps.UnknownKeys = ratelimit.NewStrikes(env.Redis, "unknownkeys", n, time.Minute)
	}
	// The sandbox's pages pay with test cards: served only when the
	// sandbox is the processor. On Stripe, Stripe hosts checkout and its
	// webhooks come in instead.
	if d.Sandbox != nil {
		deps.Pages = hosted.New(d.Service, d.Sandbox.Cards(d.Service), env.Log)
	}
	if d.Stripe != nil {
		deps.StripeWebhook = d.Stripe
	}
	api := httpapi.New(deps)
	// The merchant dashboard shares the listener: /dashboard/… is its own,
	// every other path the API's.
	dash := dashboard.New(dashboard.Options{
		Service: d.Service, Redis: env.Redis, Log: env.Log, SessionTTL: env.Config.DashboardSessionTTL,
		Secure: strings.HasPrefix(env.Config.PublicBaseURL, "https://"), Clients: clients,
	})
	srv := &http.Server{
		Addr:              env.Config.APIAddr,
		Handler:           dash.Wrap(api),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
	// On SIGTERM /readyz fails first ("draining", a required check), for
	// API_SHUTDOWN_DELAY, so load balancers stop sending before the
	// listener closes; then the server drains its requests, and the admin
	// listener, which answers the probes meanwhile, closes last.
	var draining atomic.Bool
	opts := env.Admin()
	opts.Checks["draining"] = func(context.Context) error {
		if draining.Load() {
			return errors.New("shutting down")
		}
		return nil
	}
	g, gctx := errgroup.WithContext(context.Background())
	publicCtx, stopPublic := context.WithCancel(gctx)
	adminCtx, stopAdmin := context.WithCancel(gctx)
	defer stopPublic()
	defer stopAdmin()
	go func() {
		select {
		case <-ctx.Done():
		case <-gctx.Done():
			return
		}
		draining.Store(true)
		env.Log.Info("draining: readiness fails, the listener closes after API_SHUTDOWN_DELAY", "delay", env.Config.APIShutdownDelay)
		select {
		case <-time.After(env.Config.APIShutdownDelay):
		case <-gctx.Done():
		}
		stopPublic()
	}()
	g.Go(func() error {
		defer stopAdmin()
		return admin.ServeHTTP(publicCtx, srv, env.Log, "api")
	})
	g.Go(func() error { return admin.Serve(adminCtx, env.Config.AdminAddr, admin.Handler(*opts), env.Log) })
	err = g.Wait()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	// The requests have drained: what the limiter's leases did not hand
	// out goes back to the keys' budgets now, not with this process.
	limiter.Close()
	env.Log.Info("stopped")
	return err
}

func migrate(ctx context.Context, stdout io.Writer) error {
	env, err := app.Setup(ctx, "cli", 2)
	if err != nil {
		return err
	}
	defer env.Close()
	// Migrations run on DATABASE_DIRECT_URL: DDL and goose's bookkeeping
	// expect one session throughout, which a transaction-mode pooler does
	// not give. Two connections: goose holds one for its lock and runs a
	// Go migration (one that cannot run in a transaction) on the other.
	direct, err := postgres.Open(ctx, env.Config.DatabaseDirectURL, 2)
	if err != nil {
		return fmt.Errorf("DATABASE_DIRECT_URL: %w", err)
	}
	defer direct.Close()
	res, err := postgres.Migrate(ctx, direct.DB)
	if err != nil {
		return err
	}
	applied := []string{}
	for _, r := range res {
		name := r.Source.Path
		if name == "" { // a Go migration (postgres.Migrations)
			name = fmt.Sprintf("%04d (Go, internal/postgres/migrate.go)", r.Source.Version)
		}
		applied = append(applied, name)
	}
	return json.NewEncoder(stdout).Encode(map[string]any{"applied": applied})
}

// admin_ runs the merchant and key commands.
func admin_(ctx context.Context, cmd string, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	name := fs.String("name", "", "merchant name")
	email := fs.String("email", "", "merchant email")
	plan := fs.String("plan", "free", "free, brand or pro")
	merchant := fs.String("merchant", "", "merchant id (mch_…)")
	mode := fs.String("mode", "", "test or live")
	expiresIn := fs.Duration("expires-in", 0, "key lifetime, e.g. 720h; 0 = no expiry")
	id := fs.String("id", "", "key id (key_…)")
	currency := fs.String("currency", "", "payout currency; default: the balance's only one")
	role := fs.String("role", "admin", "dashboard role: admin or viewer")
	passwordStdin := fs.Bool("password-stdin", false, "read the user's password from the first line of stdin")
	by := fs.String("by", "", "how far to move the sandbox clock: a Go duration (90m, 36h) or whole days (30d)")
	account := fs.String("account", "", "Stripe connected account id (acct_…)")
	bankName := fs.String("bank-name", "", "payout bank's name")
	routing := fs.String("routing-number", "", "payout bank's 9-digit ABA routing number")
	numberStdin := fs.Bool("account-number-stdin", false, "read the bank account number from the first line of stdin (never from the command line, which ps and shell history keep)")
	fs.SetOutput(io.Discard) // errors are returned; -h prints the command's usage below
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(stdout, cmd)
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %d", fs.NArg())
	}
	// Ids are echoed in messages; a pasted key secret must never be.
	if err := checkID("--merchant", *merchant, "mch_"); err != nil {
		return err
	}
	if err := checkID("--id", *id, "key_"); err != nil {
		return err
	}
	// The password never comes as a flag: flags show in ps and shell history.
	var password string
	if cmd == "user create" {
		if !*passwordStdin {
			return errors.New("--password-stdin is required: pipe the password in (flags would leave it in ps and shell history)")
		}
		var err error
		if password, err = readPassword(stdin); err != nil {
			return err
		}
	}
	if cmd == "sandbox payout-bank" {
		return payoutBank(ctx, *merchant, *mode, *bankName, *routing, *numberStdin, stdout)
	}
	env, err := app.Setup(ctx, "cli", 2)
	if err != nil {
		return err
	}
	defer env.Close()
	d, err := env.Domain()
	if err != nil {
		return err
	}
	svc := d.Service
	enc := json.NewEncoder(stdout)

	switch cmd {
	case "merchant create":
		m, err := svc.CreateMerchant(ctx, *name, *email, payments.Plan(*plan))
		if err != nil {
			return err
		}
		return enc.Encode(m)
	case "merchant unsuspend":
		if *merchant == "" {
			return errors.New("--merchant is required")
		}
		m, err := svc.UnsuspendMerchant(ctx, *merchant)
		if err != nil {
			return err
		}
		return enc.Encode(m)
	case "key create":
		if *merchant == "" {
			return errors.New("--merchant is required")
		}
		if *mode != "test" && *mode != "live" {
			return errors.New("--mode must be test or live")
		}
		k, err := svc.CreateKey(ctx, *merchant, *mode == "live", *expiresIn)
		if err != nil {
			return err
		}
		// A struct, not a map, so the fields print in the README's order.
		return enc.Encode(struct {
			ID         string `json:"id"`
			Key        string `json:"key"`
			MerchantID string `json:"merchant_id"`
			Mode       string `json:"mode"`
			ExpiresAt  any    `json:"expires_at"`
		}{k.ID, k.Secret, k.MerchantID, *mode, unixOrNil(k.ExpiresAt)})
	case "key revoke":
		if *id == "" {
			return errors.New("--id is required")
		}
		k, err := svc.RevokeKey(ctx, *id)
		if err != nil {
			return err
		}
		mode := "test"
		if k.Live {
			mode = "live"
		}
		return enc.Encode(struct {
			ID         string `json:"id"`
			MerchantID string `json:"merchant_id"`
			Mode       string `json:"mode"`
			Hint       string `json:"hint"`
			ExpiresAt  any    `json:"expires_at"`
			RevokedAt  any    `json:"revoked_at"`
			Created    int64  `json:"created"`
		}{k.ID, k.MerchantID, mode, k.Hint, unixOrNil(k.ExpiresAt), unixOrNil(k.RevokedAt), k.Created.Unix()})
	case "user create":
		if *merchant == "" {
			return errors.New("--merchant is required")
		}
		u, err := svc.CreateUser(ctx, *merchant, *email, payments.Role(*role), password)
		if err != nil {
			return err
		}
		return enc.Encode(u)
	case "sandbox payout":
		if *merchant == "" {
			return errors.New("--merchant is required")
		}
		if *mode != "test" && *mode != "live" {
			return errors.New("--mode must be test or live")
		}
		p, err := svc.PayoutAll(ctx, payments.Scope{MerchantID: *merchant, Live: *mode == "live"}, *currency)
		if err != nil {
			return err
		}
		return enc.Encode(p)
	case "merchant stripe-account":
		sc, err := scopeOf(*merchant, *mode)
		if err != nil {
			return err
		}
		if _, err := env.Store.MerchantPlan(ctx, sc.MerchantID); err != nil {
			return err // no such merchant
		}
		if err := stripe.SetConnectedAccount(ctx, env.DB, processor.Account{MerchantID: sc.MerchantID, Live: sc.Live}, *account); err != nil {
			return err
		}
		return enc.Encode(map[string]any{"merchant_id": sc.MerchantID, "mode": *mode, "stripe_account": *account})
	case "partitions maintain":
		// What the scheduler's hourly task does (worker.maintainPartitions),
		// run now: after the scheduler was stopped, to give the rows of
		// the default partitions their weeks without waiting for its next
		// start (writes wait only for the last part of a move).
		ch, err := env.Store.MaintainPartitions(ctx, svc.Clock().Base(), env.Config.EventRetention, payments.IdempotencyTTL)
		if err != nil {
			return err
		}
		return enc.Encode(map[string]any{"created": nonNil(ch.Created), "dropped": nonNil(ch.Dropped)})
	case "sandbox advance-clock":
		if *merchant == "" {
			return errors.New("--merchant is required")
		}
		if *mode != "test" && *mode != "live" {
			return errors.New("--mode must be test or live")
		}
		d, err := parseDays(*by)
		if err != nil {
			return err
		}
		// The due work's events leave through the outbox; enqueue their
		// deliveries now rather than leave them to the relay.
		_, closeQueue := env.Enqueuer()
		defer closeQueue()
		a, err := svc.AdvanceClock(ctx, payments.Scope{MerchantID: *merchant, Live: *mode == "live"}, d)
		if err != nil {
			return err
		}
		return enc.Encode(a)
	}
	return fmt.Errorf("unknown command %q", cmd)
}

// readPassword reads the first line of r (at most 1 KiB), without its line
// ending: `echo "$PW" | api user create … --password-stdin`.
func readPassword(r io.Reader) (string, error) {
	b, err := io.ReadAll(io.LimitReader(r, 1024))
	if err != nil {
		return "", fmt.Errorf("read the password from stdin: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	line = strings.TrimSuffix(line, "\r")
	if line == "" {
		return "", errors.New("--password-stdin: stdin held no password")
	}
	return line, nil
}

// scopeOf reads --merchant and --mode.
func scopeOf(merchant, mode string) (payments.Scope, error) {
	if merchant == "" {
		return payments.Scope{}, errors.New("--merchant is required")
	}
	if mode != "test" && mode != "live" {
		return payments.Scope{}, errors.New("--mode must be test or live")
	}
	return payments.Scope{MerchantID: merchant, Live: mode == "live"}, nil
}

// payoutBank sets a merchant's sandbox payout bank. The account number is
// read from stdin only, and goes no further than sandbox.NewPayoutBank:
// what is stored, printed and logged is the bank's name, the last four
// digits and a fingerprint keyed with SECRETS_KEY.
func payoutBank(ctx context.Context, merchant, mode, name, routing string, numberStdin bool, stdout io.Writer) error {
	sc, err := scopeOf(merchant, mode)
	if err != nil {
		return err
	}
	if !numberStdin {
		return errors.New("--account-number-stdin is required: the account number is read from stdin, never from the command line")
	}
	line, err := bufio.NewReader(io.LimitReader(stdin, 256)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return errors.New("could not read the account number from stdin")
	}
	number := strings.TrimSpace(line)
	env, err := app.Setup(ctx, "cli", 2)
	if err != nil {
		return err
	}
	defer env.Close()
	box, err := secrets.New(env.Config.SecretsKey)
	if err != nil {
		return err
	}
	if _, err := env.Store.MerchantPlan(ctx, sc.MerchantID); err != nil {
		return err // no such merchant
	}
	bank, err := sandbox.NewPayoutBank(name, routing, number, func(r, a string) string { return box.Fingerprint("payout-bank", r, a) })
	if err != nil {
		return err
	}
	a, err := sandbox.New(env.DB, env.Config.PublicBaseURL).SetPayoutBank(ctx, processor.Account{MerchantID: sc.MerchantID, Live: sc.Live}, bank)
	if err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(payments.AccountObjectOf(a, sc.Live))
}

// parseDays reads --by: a Go duration, or a whole number of days ("30d"),
// the unit a clock is usually moved by and one time.ParseDuration lacks.
func parseDays(v string) (time.Duration, error) {
	if v == "" {
		return 0, errors.New("--by is required (e.g. 36h or 30d)")
	}
	if n, ok := strings.CutSuffix(v, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil || days < 1 || days > 3650 {
			return 0, errors.New("--by in days must be a whole number from 1d to 3650d")
		}
		return time.Duration(days) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, errors.New("--by must be a duration such as 90m, 36h or 30d")
	}
	return d, nil
}

// checkID refuses a value that is not an id of the given prefix without
// repeating it: an operator may have pasted a key secret by mistake.
func checkID(flag, v, prefix string) error {
	if v == "" || strings.HasPrefix(v, prefix) {
		return nil
	}
	return fmt.Errorf("%s takes an id (%s…); the value given is not one", flag, prefix)
}

func unixOrNil(t *time.Time) any {
	if t == nil {
		return nil
	}
	return t.Unix()
}

// nonNil is s, or an empty list for nil: [] in JSON, not null.
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
