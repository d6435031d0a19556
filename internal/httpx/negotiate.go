package httpx

import (
	"net/http"
	"strconv"
	"strings"
)

// Negotiate picks, of the media types a route offers (in the server's
// order of preference), the one the request's Accept header prefers, as
// RFC 9110 §12.5.1 reads: each offer takes the weight (q) of the most
// specific media range that matches it (type/subtype over type/* over
// */*), a weight of 0 means "not acceptable", and among offers of equal
// weight the more specific match, then the server's order, wins. A request
// without an Accept header (or with only unreadable ranges) gets the first
// offer. Parameters of a range other than q are not compared: offers carry
// none. ok is false when the header rules out every offer: answer 406
// ([WriteNotAcceptable]).
func Negotiate(r *http.Request, offers ...string) (string, bool) {
	ranges := parseAccept(r.Header.Values("Accept"))
	if len(ranges) == 0 {
		return offers[0], true
	}
	best, bestQ, bestSpec := "", 0.0, -1
	for _, offer := range offers {
		typ, sub, _ := strings.Cut(strings.ToLower(offer), "/")
		q, spec := 0.0, -1
		for _, m := range ranges {
			s := m.matches(typ, sub)
			if s > spec {
				q, spec = m.q, s
			}
		}
		if spec >= 0 && q > 0 && (q > bestQ || q == bestQ && spec > bestSpec) {
			best, bestQ, bestSpec = offer, q, spec
		}
	}
	return best, best != ""
}

// WriteNotAcceptable answers 406 naming the media types the route offers.
func WriteNotAcceptable(w http.ResponseWriter, offers ...string) {
	WriteError(w, http.StatusNotAcceptable, "not_acceptable",
		"none of the media types in Accept can be served; this resource is offered as "+strings.Join(offers, ", "))
}

type mediaRange struct {
	typ, sub string // "*" for a wildcard
	q        float64
}

// matches says how specifically the range matches type/sub: 2 exactly,
// 1 by type/*, 0 by */*, -1 not at all.
func (m mediaRange) matches(typ, sub string) int {
	switch {
	case m.typ == "*":
		return 0
	case m.typ != typ:
		return -1
	case m.sub == "*":
		return 1
	case m.sub == sub:
		return 2
	}
	return -1
}

// parseAccept reads the media ranges of Accept header values, skipping any
// that is malformed (no slash, */subtype, a q that is not a number in
// [0, 1] with at most three decimals).
func parseAccept(values []string) []mediaRange {
	var out []mediaRange
	for _, v := range values {
		for part := range strings.SplitSeq(v, ",") {
			fields := strings.Split(part, ";")
			mt := strings.ToLower(strings.TrimSpace(fields[0]))
			typ, sub, ok := strings.Cut(mt, "/")
			if !ok || typ == "" || sub == "" || typ == "*" && sub != "*" {
				continue
			}
			m := mediaRange{typ: typ, sub: sub, q: 1}
			for _, p := range fields[1:] {
				k, val, _ := strings.Cut(strings.TrimSpace(p), "=")
				if !strings.EqualFold(strings.TrimSpace(k), "q") {
					continue
				}
				q, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
				if err != nil || q < 0 || q > 1 || len(strings.TrimSpace(val)) > 5 {
					ok = false
					break
				}
				m.q = q
			}
			if ok {
				out = append(out, m)
			}
		}
	}
	return out
}
