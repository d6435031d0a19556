package events

import (
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
)

// TestFastRulesAgree holds the compiled rules (rulesfast.go) to the
// interpreted ones: on random objects of every struct type in the
// catalogue, of every version, and of the types they hold, a compiled
// rule set passes exactly the objects checkRules passes. The values are
// drawn from a few small numbers, both zeros of a float, NaN, absent and
// empty arrays, so that every bound, order and requirement is met and
// broken often.
func TestFastRulesAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 27))
	var types []reflect.Type
	seen := map[reflect.Type]bool{}
	var walk func(reflect.Type)
	walk = func(rt reflect.Type) {
		for rt.Kind() == reflect.Pointer || rt.Kind() == reflect.Slice || rt.Kind() == reflect.Map {
			rt = rt.Elem()
		}
		if rt.Kind() != reflect.Struct || rt.PkgPath() != reflect.TypeFor[Event]().PkgPath() || seen[rt] {
			return
		}
		seen[rt] = true
		types = append(types, rt)
		for i := range rt.NumField() {
			walk(rt.Field(i).Type)
		}
	}
	for _, versions := range catalogue {
		for _, v := range versions {
			walk(reflect.TypeOf(v.newWire()))
		}
	}
	compiled := map[string]bool{}
	for _, rt := range types {
		s := specOf(rt)
		if s.fast == nil {
			continue
		}
		compiled[rt.Name()] = true
		passed, failed := 0, 0
		// Objects that pass are kept, and most objects drawn are one of
		// them with a field or two drawn again: a type with many rules
		// passes them seldom at random, and the zero value passes all.
		pool := []reflect.Value{reflect.New(rt).Elem()}
		for range 20000 {
			v := reflect.New(rt).Elem()
			if rng.IntN(4) == 0 {
				fill(rng, v, 0)
			} else {
				v.Set(pool[rng.IntN(len(pool))])
				for range 1 + rng.IntN(2) {
					if f := rng.IntN(rt.NumField()); rt.Field(f).IsExported() {
						fill(rng, v.Field(f), 1)
					}
				}
			}
			fast := s.fast(v.Addr().UnsafePointer())
			saved := s.fast
			s.fast = nil
			slow := checkRules(v, s, "data") == nil
			s.fast = saved
			if fast != slow {
				t.Fatalf("%s: compiled rules say %v, interpreted %v, of %+v", rt.Name(), fast, slow, v.Interface())
			}
			if slow {
				passed++
				if len(pool) < 256 {
					pool = append(pool, v)
				}
			} else {
				failed++
			}
		}
		if passed == 0 || failed == 0 {
			t.Errorf("%s: %d random objects passed, %d failed: the test draws too narrowly", rt.Name(), passed, failed)
		}
	}
	// The types nearly every fact is, and those whose rules use every
	// compiled form, must not fall back to the interpreter.
	for _, name := range []string{"TurnGenerated", "turnGeneratedV2", "turnGeneratedV1", "ToolCalled", "ContextCompacted",
		"RewardComputed", "GroupStarted", "VocabularyRegistered"} {
		if !compiled[name] {
			t.Errorf("%s: its rules are not compiled", name)
		}
	}
}

// fill sets v, a settable value, to a random value of its type.
func fill(rng *rand.Rand, v reflect.Value, depth int) {
	switch v.Kind() {
	case reflect.String:
		v.SetString([]string{"", "a", "b", "c"}[rng.IntN(4)])
	case reflect.Bool:
		v.SetBool(rng.IntN(2) == 0)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt([]int64{-2, -1, 0, 0, 1, 2, 3, 4, 5, 100}[rng.IntN(10)])
	case reflect.Float32, reflect.Float64:
		v.SetFloat([]float64{-1, math.Copysign(0, -1), 0, 0.5, 1, 2, 3, math.NaN()}[rng.IntN(8)])
	case reflect.Pointer:
		if rng.IntN(3) == 0 || depth > 3 {
			return
		}
		p := reflect.New(v.Type().Elem())
		fill(rng, p.Elem(), depth+1)
		v.Set(p)
	case reflect.Slice:
		switch n := rng.IntN(8); {
		case n == 0 || depth > 3:
			return
		case n == 1:
			v.Set(reflect.MakeSlice(v.Type(), 0, 0))
		default:
			s := reflect.MakeSlice(v.Type(), n-1, n-1)
			for i := range n - 1 {
				fill(rng, s.Index(i), depth+1)
			}
			v.Set(s)
		}
	case reflect.Map:
		if rng.IntN(2) == 0 || depth > 3 {
			return
		}
		m := reflect.MakeMap(v.Type())
		for range rng.IntN(3) {
			k := reflect.New(v.Type().Key()).Elem()
			e := reflect.New(v.Type().Elem()).Elem()
			fill(rng, k, depth+1)
			fill(rng, e, depth+1)
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(rng, v.Field(i), depth+1)
			}
		}
	}
}
