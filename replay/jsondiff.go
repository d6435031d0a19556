package replay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
)

// firstDifference walks two JSON values in the order of a's members and
// returns the path of the first place they differ (like
// data.groups[2].attempts[0].advantage) and the two values there, as
// compact JSON. ok is false when they are equal as JSON.
func firstDifference(a, b []byte) (path string, av, bv string, ok bool) {
	na, errA := parseOrdered(a)
	nb, errB := parseOrdered(b)
	if errA != nil || errB != nil {
		if bytes.Equal(a, b) {
			return "", "", "", false
		}
		return "", clip(string(a)), clip(string(b)), true
	}
	return diffNodes("", na, nb)
}

// node is a JSON value that keeps its object members in order.
type node struct {
	raw    json.RawMessage
	keys   []string
	fields []*node // object members, parallel to keys
	items  []*node // array elements
	kind   byte    // '{', '[', or 0 for a scalar
}

func parseOrdered(b []byte) (*node, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	n, err := parseNode(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("trailing data")
	}
	return n, nil
}

func parseNode(dec *json.Decoder) (*node, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		n := &node{kind: byte(t)}
		for dec.More() {
			if t == '{' {
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				key, _ := k.(string)
				v, err := parseNode(dec)
				if err != nil {
					return nil, err
				}
				n.keys, n.fields = append(n.keys, key), append(n.fields, v)
				continue
			}
			v, err := parseNode(dec)
			if err != nil {
				return nil, err
			}
			n.items = append(n.items, v)
		}
		if _, err := dec.Token(); err != nil { // the closing delimiter
			return nil, err
		}
		return n, nil
	default:
		raw, err := json.Marshal(t)
		return &node{raw: raw}, err
	}
}

func (n *node) String() string {
	if n == nil {
		return "(absent)"
	}
	switch n.kind {
	case '{':
		return clip(fmt.Sprintf("{%d members}", len(n.keys)))
	case '[':
		return fmt.Sprintf("[%d items]", len(n.items))
	}
	return clip(string(n.raw))
}

func diffNodes(path string, a, b *node) (string, string, string, bool) {
	at := func(p string) string {
		if p == "" {
			return "(the whole value)"
		}
		return p
	}
	if a == nil || b == nil || a.kind != b.kind {
		return at(path), a.String(), b.String(), true
	}
	join := func(k string) string {
		if path == "" {
			return k
		}
		return path + "." + k
	}
	switch a.kind {
	case '{':
		for i, k := range a.keys {
			var bv *node
			for j, bk := range b.keys {
				if bk == k {
					bv = b.fields[j]
					break
				}
			}
			if p, x, y, ok := diffNodes(join(k), a.fields[i], bv); ok {
				return p, x, y, true
			}
		}
		for j, k := range b.keys {
			found := false
			for _, ak := range a.keys {
				found = found || ak == k
			}
			if !found {
				return join(k), "(absent)", b.fields[j].String(), true
			}
		}
		return "", "", "", false
	case '[':
		for i := range max(len(a.items), len(b.items)) {
			var x, y *node
			if i < len(a.items) {
				x = a.items[i]
			}
			if i < len(b.items) {
				y = b.items[i]
			}
			if p, xs, ys, ok := diffNodes(path+"["+strconv.Itoa(i)+"]", x, y); ok {
				return p, xs, ys, true
			}
		}
		return "", "", "", false
	}
	if !bytes.Equal(a.raw, b.raw) {
		return at(path), a.String(), b.String(), true
	}
	return "", "", "", false
}

func clip(s string) string {
	const n = 160
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
