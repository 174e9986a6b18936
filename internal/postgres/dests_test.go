package postgres

import (
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// TestDestsFollowColumns: each row type's dests point at its fields in the
// order of its column list, named as the fields' db tags say, so a row
// scanned through dests gets what sqlx would have mapped by name.
func TestDestsFollowColumns(t *testing.T) {
	for _, c := range []struct {
		name string
		cols string
		row  scanner
	}{
		{"product", productCols, &productRow{}},
		{"customer", customerCols, &customerRow{}},
		{"intent", intentCols, &intentRow{}},
		{"subscription", subscriptionCols, &subscriptionRow{}},
		{"subscription product", subProductCols, &subProductRow{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got, want := destTags(t, c.row), columnNames(c.cols); !reflect.DeepEqual(got, want) {
				t.Errorf("got dests %q, want columns %q", got, want)
			}
		})
	}
}

var (
	parens  = regexp.MustCompile(`\([^()]*\)`)
	colName = regexp.MustCompile(`(?i)(?:\bAS\s+(\w+)|(?:\w+\.)?(\w+))\s*$`)
)

// columnNames are the names a column list's results come under: an
// alias, else the column without its table.
func columnNames(cols string) []string {
	for parens.MatchString(cols) { // subqueries and calls, innermost first
		cols = parens.ReplaceAllString(cols, "x")
	}
	var names []string
	for _, c := range strings.Split(cols, ",") {
		m := colName.FindStringSubmatch(strings.TrimSpace(c))
		if m == nil {
			names = append(names, "?"+c)
			continue
		}
		names = append(names, m[1]+m[2])
	}
	return names
}

// destTags are the db tags of the fields row's dests point at, in order.
func destTags(t *testing.T, row scanner) []string {
	v := reflect.ValueOf(row).Elem()
	var tags []string
	for _, d := range row.dests() {
		p := reflect.ValueOf(d).Pointer()
		tag := ""
		for i := range v.NumField() {
			if v.Field(i).Addr().Pointer() == p && v.Field(i).Addr().Type() == reflect.TypeOf(d) {
				tag = v.Type().Field(i).Tag.Get("db")
			}
		}
		if tag == "" {
			t.Errorf("a dest of %T is none of its fields", row)
		}
		tags = append(tags, tag)
	}
	return tags
}
