package payments

import "slices"

// currencies is the set of ISO 4217 codes accepted, with the number of minor
// units each has (0 for zero-decimal currencies such as JPY).
var currencies = func() map[string]int {
	m := map[string]int{}
	for _, c := range []string{
		"aed", "afn", "all", "amd", "ang", "aoa", "ars", "aud", "awg", "azn", "bam", "bbd", "bdt", "bgn",
		"bmd", "bnd", "bob", "brl", "bsd", "btn", "bwp", "byn", "bzd", "cad", "cdf", "chf", "cny", "cop",
		"crc", "cup", "cve", "czk", "dkk", "dop", "dzd", "egp", "ern", "etb", "eur", "fjd", "fkp", "gbp",
		"gel", "ghs", "gip", "gmd", "gtq", "gyd", "hkd", "hnl", "htg", "huf", "idr", "ils", "inr", "irr",
		"isk", "jmd", "kes", "kgs", "khr", "kpw", "kyd", "kzt", "lak", "lbp", "lkr", "lrd", "lsl", "mad",
		"mdl", "mkd", "mmk", "mnt", "mop", "mru", "mur", "mvr", "mwk", "mxn", "myr", "mzn", "nad", "ngn",
		"nio", "nok", "npr", "nzd", "pab", "pen", "pgk", "php", "pkr", "pln", "qar", "ron", "rsd", "rub",
		"sar", "sbd", "scr", "sdg", "sek", "sgd", "shp", "sle", "sll", "sos", "srd", "ssp", "stn", "svc",
		"syp", "szl", "thb", "tjs", "tmt", "top", "try", "ttd", "twd", "tzs", "uah", "usd", "uyu", "uzs",
		"ves", "wst", "xcd", "yer", "zar", "zmw", "zwl",
	} {
		m[c] = 2
	}
	for _, c := range []string{"bif", "clp", "djf", "gnf", "jpy", "kmf", "krw", "mga", "pyg", "rwf", "ugx", "vnd", "vuv", "xaf", "xof", "xpf"} {
		m[c] = 0
	}
	for _, c := range []string{"bhd", "iqd", "jod", "kwd", "lyd", "omr", "tnd"} {
		m[c] = 3
	}
	return m
}()

// MinorUnits returns how many decimal places currency c (lower case) has.
func MinorUnits(c string) int { return currencies[c] }

// Currencies returns the accepted codes, sorted (the OpenAPI description
// lists the same).
func Currencies() []string {
	out := make([]string, 0, len(currencies))
	for c := range currencies {
		out = append(out, c)
	}
	slices.Sort(out)
	return out
}
