package dashboard

import (
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"math"
	"strconv"
	"strings"
	"time"

	"paysvc/internal/payments"
)

// symbols are the currency signs merchants read amounts with; other
// currencies show their code after the amount.
var symbols = map[string]string{
	"usd": "$", "eur": "€", "gbp": "£", "jpy": "¥", "cad": "CA$", "aud": "A$", "nzd": "NZ$",
	"inr": "₹", "krw": "₩", "brl": "R$", "mxn": "MX$", "hkd": "HK$", "sgd": "S$",
}

// formatMoney shows minor units in the currency's own decimals with
// thousands separators: 123456 usd → "$1,234.56", 500 jpy → "¥500".
func formatMoney(amount int64, currency string) string {
	cur := strings.ToLower(currency)
	sign := ""
	if amount < 0 {
		sign, amount = "-", -amount
	}
	d := payments.MinorUnits(cur)
	scale := int64(math.Pow10(d))
	num := groupThousands(amount / scale)
	if d > 0 {
		num += fmt.Sprintf(".%0*d", d, amount%scale)
	}
	if s, ok := symbols[cur]; ok {
		return sign + s + num
	}
	return sign + num + " " + strings.ToUpper(cur)
}

func groupThousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// parseAmount reads a decimal amount typed in a currency's major units
// ("12.5" usd → 1250) exactly, without floating point. Codes:
// validation_error.
func parseAmount(s, currency string) (int64, error) {
	s = strings.TrimSpace(strings.ReplaceAll(s, ",", ""))
	d := payments.MinorUnits(strings.ToLower(currency))
	whole, frac, hasFrac := strings.Cut(s, ".")
	bad := payments.Invalid("amount", "must be a positive amount with at most %d decimals, such as %s", d, formatMoney(int64(math.Pow10(d))*12+int64(math.Pow10(d))/2, currency))
	if whole == "" && !hasFrac || len(frac) > d || (hasFrac && d == 0) {
		return 0, bad
	}
	frac += strings.Repeat("0", d-len(frac))
	for _, c := range whole + frac {
		if c < '0' || c > '9' {
			return 0, bad
		}
	}
	if len(whole)+len(frac) > 15 { // far beyond any payment, and safe from overflow
		return 0, bad
	}
	n, _ := strconv.ParseInt("0"+whole+frac, 10, 64)
	if n <= 0 {
		return 0, bad
	}
	return n, nil
}

// when renders a time in the viewer's zone inside <time>, whose datetime
// the page's script may re-render in the browser's own locale.
func when(loc *time.Location, t any) template.HTML {
	var tt time.Time
	switch v := t.(type) {
	case time.Time:
		tt = v
	case *time.Time:
		if v == nil {
			return "—"
		}
		tt = *v
	case int64: // the API objects' Unix seconds
		tt = time.Unix(v, 0)
	case *int64:
		if v == nil {
			return "—"
		}
		tt = time.Unix(*v, 0)
	default:
		return "—"
	}
	if loc == nil {
		loc = time.UTC
	}
	local := tt.In(loc)
	return template.HTML(fmt.Sprintf(`<time datetime="%s">%s</time>`,
		tt.UTC().Format(time.RFC3339), template.HTMLEscapeString(local.Format("2 Jan 2006, 15:04 MST"))))
}

// str shows an optional text, or a dash.
func str(p *string) string {
	if p == nil || *p == "" {
		return "—"
	}
	return *p
}

// prettyJSON indents an event's payload for its detail page.
func prettyJSON(raw []byte) string {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return string(raw)
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return string(raw)
	}
	return string(b)
}

// eventSummary is the part of an event's payload a list shows.
type eventSummary struct {
	ID      string
	Type    string
	Created time.Time
	Object  string // the id of the object it is about
	Payload string
}

func summarize(e payments.StoredEvent) eventSummary {
	var p struct {
		Created int64 `json:"created"`
		Data    struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	_ = json.Unmarshal(e.Payload, &p)
	return eventSummary{ID: e.ID, Type: e.Type, Created: time.Unix(p.Created, 0), Object: p.Data.ID, Payload: prettyJSON(e.Payload)}
}

func summarizeAll(evs []payments.StoredEvent) []eventSummary {
	out := make([]eventSummary, 0, len(evs))
	for _, e := range evs {
		out = append(out, summarize(e))
	}
	return out
}

// objectPath is the dashboard path of an object by its id's prefix, or ""
// when it has no page.
func objectPath(base, id string) string {
	for prefix, section := range map[string]string{
		"pi_": "payments", "re_": "refunds", "dp_": "disputes", "cus_": "customers", "prod_": "products", "evt_": "events",
		"sub_": "subscriptions", "we_": "webhooks",
	} {
		if strings.HasPrefix(id, prefix) {
			return base + "/" + section + "/" + id
		}
	}
	return ""
}

// ---- the volume chart ----

// chart is a server-rendered bar chart of daily volume in one currency:
// no script, no outside asset, readable by a screen reader through its
// title and the bars' titles.
type chart struct {
	Currency string
	Total    string
	Max      string
	First    string
	Last     string
	Bars     []bar
	Width    int
	Height   int
}

type bar struct {
	X, Y, W, H float64
	Label      string
}

const (
	chartWidth  = 600
	chartHeight = 160
)

// charts builds one chart per currency from DailyVolume's days.
func charts(days []payments.DayVolume) []chart {
	var out []chart
	for len(days) > 0 {
		cur := days[0].Currency
		n := 0
		for n < len(days) && days[n].Currency == cur {
			n++
		}
		out = append(out, oneChart(cur, days[:n]))
		days = days[n:]
	}
	return out
}

func oneChart(cur string, days []payments.DayVolume) chart {
	var total, peak int64
	for _, d := range days {
		total += d.Amount
		peak = max(peak, d.Amount)
	}
	c := chart{Currency: strings.ToUpper(cur), Total: formatMoney(total, cur), Max: formatMoney(peak, cur),
		First: days[0].Day.Format("2 Jan"), Last: days[len(days)-1].Day.Format("2 Jan"), Width: chartWidth, Height: chartHeight}
	slot := float64(chartWidth) / float64(len(days))
	for i, d := range days {
		h := 0.0
		if peak > 0 {
			h = float64(d.Amount) / float64(peak) * (chartHeight - 4)
		}
		if d.Amount > 0 && h < 1 {
			h = 1 // a day with any volume stays visible
		}
		c.Bars = append(c.Bars, bar{
			X: float64(i)*slot + 1, W: slot - 2, Y: chartHeight - h, H: h,
			Label: fmt.Sprintf("%s: %s in %d payment%s", d.Day.Format("Mon 2 Jan"), formatMoney(d.Amount, cur), d.Count, plural(d.Count)),
		})
	}
	return c
}

// ---- templates ----

var funcs = template.FuncMap{
	"money": formatMoney,
	"when":  when,
	"str":   str,
	"upper": strings.ToUpper,
	"objectPath": func(base string, id any) string {
		switch v := id.(type) {
		case string:
			return objectPath(base, v)
		case *string:
			if v != nil {
				return objectPath(base, *v)
			}
		}
		return ""
	},
	// pair hands a shared row template the page's view and the rows.
	"pair": func(v any, items any) map[string]any { return map[string]any{"V": v, "Items": items} },
	"strs": func(v ...string) []string { return v },
	"f1":   func(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) },
	// every is a price's period in words ("month", "30 days", "2 weeks"),
	// as the customer's pages say it: the interval with its count.
	"every": func(interval string, count int) string {
		return payments.Interval{Name: interval, Count: count}.Phrase()
	},
}

// parsePages parses each page with the layout: one template set per page,
// so each can define its own "content".
func parsePages() map[string]*template.Template {
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		panic(err)
	}
	out := map[string]*template.Template{}
	for _, n := range names {
		name := strings.TrimPrefix(n, "templates/")
		if name == "layout.html" {
			continue
		}
		out[name] = template.Must(template.New(name).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", n))
	}
	return out
}
