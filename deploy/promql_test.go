package deploy

import (
	"fmt"
	"strings"
	"testing"
)

// A small PromQL reader: enough to list the metric names, label matchers
// and grouping labels of the queries in this kit (the dashboard's and the
// alert rules'), and to refuse what it does not understand rather than
// let it pass unchecked. It is not a parser: it reads tokens, and knows
// that an identifier before "(" is a function, one after by, without,
// on, ignoring, group_left or group_right starts a label list, and any
// other is a metric name, with its matchers if "{" follows.

// matcher is one label matcher of a selector: label op "value".
type matcher struct{ label, op, value string }

// selector is one series selector of a query.
type selector struct {
	metric   string
	matchers []matcher
	// rangeFunc is the function the selector is the direct argument of
	// (rate, increase, ...), if any.
	rangeFunc string
}

// query is what a PromQL expression uses.
type query struct {
	expr      string
	selectors []selector
	grouping  []string // labels of by, without, on, ignoring, group_left, group_right
	functions []string
}

type tokenKind int

const (
	tIdent tokenKind = iota
	tString
	tNumber
	tPunct
	tRange // [5m], [$__rate_interval], [1h:5m]: the text inside the brackets
	tVar   // a Grafana variable outside a string: $x, ${x}
)

type token struct {
	kind tokenKind
	text string
}

// aggregations are PromQL's aggregation operators, which may take their
// by or without clause before their argument.
var aggregations = set("sum", "min", "max", "avg", "group", "stddev", "stdvar", "count",
	"count_values", "bottomk", "topk", "quantile", "limitk", "limit_ratio")

// promqlFunctions are PromQL's functions and aggregation operators.
var promqlFunctions = union(aggregations, set(
	"abs", "absent", "absent_over_time", "ceil", "changes", "clamp", "clamp_max", "clamp_min",
	"day_of_month", "day_of_week", "day_of_year", "days_in_month", "delta", "deriv", "exp",
	"floor", "histogram_avg", "histogram_count", "histogram_fraction", "histogram_quantile",
	"histogram_stddev", "histogram_stdvar", "histogram_sum", "holt_winters", "hour", "idelta",
	"increase", "irate", "ln", "log2", "log10", "minute", "month", "predict_linear", "rate",
	"resets", "round", "scalar", "sgn", "sort", "sort_desc", "sqrt", "time", "timestamp",
	"vector", "year", "avg_over_time", "min_over_time", "max_over_time", "sum_over_time",
	"count_over_time", "quantile_over_time", "stddev_over_time", "stdvar_over_time",
	"last_over_time", "present_over_time",
	"acos", "acosh", "asin", "asinh", "atan", "atanh", "cos", "cosh", "sin", "sinh", "tan",
	"tanh", "deg", "rad", "pi",
))

// labelMakingFunctions build labels from strings, which this reader does
// not follow: a query that uses them is refused, so that it cannot pass
// unchecked.
var labelMakingFunctions = set("label_replace", "label_join", "count_values")

// counterFunctions take a range of a counter.
var counterFunctions = set("rate", "irate", "increase", "resets")

var labelListKeywords = set("by", "without", "on", "ignoring", "group_left", "group_right")

var otherKeywords = set("and", "or", "unless", "atan2", "bool", "offset", "inf", "nan")

func set(items ...string) map[string]bool {
	m := make(map[string]bool, len(items))
	for _, it := range items {
		m[it] = true
	}
	return m
}

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isIdentChar(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// lex splits a PromQL expression into tokens.
func lex(s string) ([]token, error) {
	var toks []token
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			var b strings.Builder
			j := i + 1
			for ; j < len(s) && s[j] != c; j++ {
				if s[j] == '\\' && c != '`' && j+1 < len(s) {
					j++
				}
				b.WriteByte(s[j])
			}
			if j == len(s) {
				return nil, fmt.Errorf("unterminated string at %d", i)
			}
			toks = append(toks, token{tString, b.String()})
			i = j + 1
		case c == '[':
			j := strings.IndexByte(s[i:], ']')
			if j < 0 {
				return nil, fmt.Errorf("unterminated range at %d", i)
			}
			toks = append(toks, token{tRange, s[i+1 : i+j]})
			i += j + 1
		case c == '$':
			j := i + 1
			if j < len(s) && s[j] == '{' {
				k := strings.IndexByte(s[j:], '}')
				if k < 0 {
					return nil, fmt.Errorf("unterminated variable at %d", i)
				}
				j += k + 1
			} else {
				for j < len(s) && isIdentChar(s[j]) {
					j++
				}
			}
			toks = append(toks, token{tVar, s[i:j]})
			i = j
		case isDigit(c) || c == '.' && i+1 < len(s) && isDigit(s[i+1]):
			j := i
			for j < len(s) && (isIdentChar(s[j]) || s[j] == '.') {
				j++
			}
			toks = append(toks, token{tNumber, s[i:j]})
			i = j
		case isIdentStart(c):
			j := i
			for j < len(s) && isIdentChar(s[j]) {
				j++
			}
			toks = append(toks, token{tIdent, s[i:j]})
			i = j
		default:
			if i+1 < len(s) {
				switch two := s[i : i+2]; two {
				case "!=", "=~", "!~", "==", "<=", ">=":
					toks = append(toks, token{tPunct, two})
					i += 2
					continue
				}
			}
			if !strings.ContainsRune("(){},=<>+-*/%^@", rune(c)) {
				return nil, fmt.Errorf("unexpected %q at %d", c, i)
			}
			toks = append(toks, token{tPunct, string(c)})
			i++
		}
	}
	return toks, nil
}

// parseQuery reads what expr uses.
func parseQuery(expr string) (query, error) {
	q := query{expr: expr}
	toks, err := lex(expr)
	if err != nil {
		return q, err
	}
	at := func(i int) token {
		if i < 0 || i >= len(toks) {
			return token{kind: -1}
		}
		return toks[i]
	}
	isPunct := func(i int, p string) bool { t := at(i); return t.kind == tPunct && t.text == p }
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		switch {
		case t.kind == tIdent && labelListKeywords[t.text]:
			if !isPunct(i+1, "(") {
				if t.text == "group_left" || t.text == "group_right" {
					continue
				}
				return q, fmt.Errorf("%s without a label list", t.text)
			}
			j := i + 2
			for ; !isPunct(j, ")"); j++ {
				switch tk := at(j); {
				case tk.kind == tIdent:
					q.grouping = append(q.grouping, tk.text)
				case isPunct(j, ","):
				default:
					return q, fmt.Errorf("unexpected %q in the label list of %s", tk.text, t.text)
				}
			}
			i = j
		case t.kind == tIdent && otherKeywords[t.text]:
		case t.kind == tIdent && (isPunct(i+1, "(") ||
			aggregations[t.text] && at(i+1).kind == tIdent && (at(i+1).text == "by" || at(i+1).text == "without")):
			if labelMakingFunctions[t.text] {
				return q, fmt.Errorf("%s makes labels from strings, which this checker does not follow: extend it, or write the query without it", t.text)
			}
			if !promqlFunctions[t.text] {
				return q, fmt.Errorf("unknown function %s", t.text)
			}
			q.functions = append(q.functions, t.text)
		case t.kind == tIdent:
			sel := selector{metric: t.text}
			if isPunct(i-1, "(") && at(i-2).kind == tIdent {
				sel.rangeFunc = at(i - 2).text
			}
			if isPunct(i+1, "{") {
				ms, end, err := parseMatchers(toks, i+1)
				if err != nil {
					return q, fmt.Errorf("%s: %w", t.text, err)
				}
				sel.matchers, i = ms, end
			}
			q.selectors = append(q.selectors, sel)
		case isPunct(i, "{"):
			ms, end, err := parseMatchers(toks, i)
			if err != nil {
				return q, err
			}
			sel := selector{matchers: ms}
			for _, m := range ms {
				if m.label == "__name__" && m.op == "=" {
					sel.metric = m.value
				}
			}
			if sel.metric == "" {
				return q, fmt.Errorf("a selector without a metric name: %s", expr)
			}
			q.selectors = append(q.selectors, sel)
			i = end
		}
	}
	return q, nil
}

// parseMatchers reads {label op "value", ...} from toks[open], which is
// "{", and returns the matchers and the index of the closing "}".
func parseMatchers(toks []token, open int) ([]matcher, int, error) {
	var ms []matcher
	i := open + 1
	for {
		if i >= len(toks) {
			return nil, 0, fmt.Errorf("unterminated selector")
		}
		if toks[i].kind == tPunct && toks[i].text == "}" {
			return ms, i, nil
		}
		if i+2 >= len(toks) || toks[i].kind != tIdent || toks[i+1].kind != tPunct || toks[i+2].kind != tString {
			return nil, 0, fmt.Errorf("malformed matcher at %q", toks[i].text)
		}
		op := toks[i+1].text
		if op != "=" && op != "!=" && op != "=~" && op != "!~" {
			return nil, 0, fmt.Errorf("bad matcher operator %q", op)
		}
		ms = append(ms, matcher{label: toks[i].text, op: op, value: toks[i+2].text})
		i += 3
		if i < len(toks) && toks[i].kind == tPunct && toks[i].text == "," {
			i++
		}
	}
}

// TestParseQuery pins the reader on the shapes this kit uses, and on what
// it must refuse.
func TestParseQuery(t *testing.T) {
	q, err := parseQuery(`histogram_quantile(0.99, sum by (le, op) (rate(payrecon_provider_request_duration_seconds_bucket{job=~"$job"}[$__rate_interval])))`)
	if err != nil {
		t.Fatal(err)
	}
	if len(q.selectors) != 1 || q.selectors[0].metric != "payrecon_provider_request_duration_seconds_bucket" ||
		q.selectors[0].rangeFunc != "rate" || len(q.selectors[0].matchers) != 1 ||
		q.selectors[0].matchers[0] != (matcher{"job", "=~", "$job"}) {
		t.Errorf("selectors: %+v", q.selectors)
	}
	if strings.Join(q.grouping, ",") != "le,op" || strings.Join(q.functions, ",") != "histogram_quantile,sum,rate" {
		t.Errorf("grouping %v, functions %v", q.grouping, q.functions)
	}

	q, err = parseQuery(`absent(payrecon_worker_running == 1 and on (job, instance) up == 1)`)
	if err != nil {
		t.Fatal(err)
	}
	if len(q.selectors) != 2 || q.selectors[0].metric != "payrecon_worker_running" || q.selectors[1].metric != "up" ||
		strings.Join(q.grouping, ",") != "job,instance" {
		t.Errorf("%+v", q)
	}

	q, err = parseQuery(`sum(increase(payrecon_webhook_events_total{outcome="contradiction", type!~'x|y'}[15m])) by (type) > 0`)
	if err != nil {
		t.Fatal(err)
	}
	if len(q.selectors) != 1 || len(q.selectors[0].matchers) != 2 || q.selectors[0].matchers[1] != (matcher{"type", "!~", "x|y"}) ||
		q.selectors[0].rangeFunc != "increase" || strings.Join(q.grouping, ",") != "type" {
		t.Errorf("%+v", q)
	}

	q, err = parseQuery(`{__name__="payrecon_escalations_open"} offset 5m`)
	if err != nil || len(q.selectors) != 1 || q.selectors[0].metric != "payrecon_escalations_open" {
		t.Errorf("%+v %v", q, err)
	}

	for _, bad := range []string{
		`label_replace(up, "x", "$1", "instance", "(.*)")`,
		`summ(payrecon_purchases)`,
		`{job="payrecon"}`,
		`payrecon_purchases{state="x"`,
		`payrecon_purchases{state=x}`,
		`sum by payrecon_purchases`,
	} {
		if _, err := parseQuery(bad); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}
