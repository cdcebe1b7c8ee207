// kvrs gotags: what Go's encoding/json writes for KubeVirt v1.9.0's API types.
//
// KubeVirt's API server and controllers write VirtualMachines and VirtualMachineInstances with
// encoding/json over the Go structs of kubevirt.io/api. What ends up in an object (a `false` left
// out, a `"0"` quantity written, a `null` list) is decided by each field's Go type and json tag,
// which KubeVirt's OpenAPI document does not carry. This tool reads them by reflection.
//
//	gotags rules      prints the table: every struct type reachable from v1.VirtualMachine and
//	                  v1.VirtualMachineInstance, by OpenAPI definition name, with each JSON key's
//	                  Go kind and tag options (scripts/gen-api-types.py reads it).
//	gotags remarshal  reads a JSON array of VirtualMachine / VirtualMachineInstance objects on
//	                  stdin and prints each as KubeVirt's Go types write it back (json.Unmarshal
//	                  into the struct, then json.Marshal), as a JSON array.
//	gotags remarshal-as  the same for any struct of the table: reads a JSON array of
//	                  {"type": OpenAPI name, "value": JSON}, prints the array of values written back.
package main

import (
	"encoding"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"reflect"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "kubevirt.io/api/core/v1"
)

// Field is one JSON key of a struct as encoding/json sees it.
type Field struct {
	// Go field name (the promoted field's own name when it comes from an embedded struct).
	Go string `json:"go"`
	// pointer, struct, quantity, time, marshaler, string, bool, int, uint, float, slice, map or
	// interface: how encoding/json treats the value.
	Kind string `json:"kind"`
	// The Go type of the value (for pointers, slices and maps: of what they hold).
	Type string `json:"type"`
	// For a pointer, slice or map: the kind of what it points to or holds.
	Elem      string `json:"elem,omitempty"`
	OmitEmpty bool   `json:"omitempty"`
	OmitZero  bool   `json:"omitzero"`
	// The `,string` option: the number or bool is written as a JSON string.
	AsString bool `json:"string,omitempty"`
	// For quantity, time and marshaler: what the type's own MarshalJSON writes for its zero value
	// (`"0"` for a Quantity, `null` for a Time).
	Zero json.RawMessage `json:"zero,omitempty"`
	// The embedded (anonymous) struct fields this key is promoted through, outermost first; a
	// `*` marks an embedded pointer, whose fields encoding/json leaves out entirely when it is nil.
	Via []string `json:"via,omitempty"`
}

// Type is one struct type of the table.
type Type struct {
	Go     string           `json:"go"`
	Fields map[string]Field `json:"fields"`
}

// Table is what `gotags rules` prints.
type Table struct {
	About string          `json:"about"`
	Roots []string        `json:"roots"`
	Types map[string]Type `json:"types"`
}

var (
	quantityType  = reflect.TypeOf(resource.Quantity{})
	timeType      = reflect.TypeOf(metav1.Time{})
	marshalerType = reflect.TypeOf((*json.Marshaler)(nil)).Elem()
	textType      = reflect.TypeOf((*encoding.TextMarshaler)(nil)).Elem()
)

// openAPIName names a Go type as KubeVirt's OpenAPI document does: `v1.Features` for
// kubevirt.io packages (the last path element, then the name), the whole dotted path for others
// (`k8s.io.api.core.v1.Affinity`).
func openAPIName(t reflect.Type) string {
	p := t.PkgPath()
	if strings.HasPrefix(p, "kubevirt.io/") {
		return p[strings.LastIndex(p, "/")+1:] + "." + t.Name()
	}
	return strings.ReplaceAll(p, "/", ".") + "." + t.Name()
}

func goName(t reflect.Type) string {
	if t.Name() != "" && t.PkgPath() != "" {
		return t.PkgPath() + "." + t.Name()
	}
	return t.String()
}

func custom(t reflect.Type) bool {
	return t.Implements(marshalerType) || reflect.PointerTo(t).Implements(marshalerType) ||
		t.Implements(textType) || reflect.PointerTo(t).Implements(textType)
}

// kindOf says how encoding/json treats a value of type t.
func kindOf(t reflect.Type) string {
	switch {
	case t == quantityType:
		return "quantity"
	case t == timeType:
		return "time"
	case t.Kind() != reflect.Pointer && t.Kind() != reflect.Interface && custom(t):
		return "marshaler"
	}
	switch t.Kind() {
	case reflect.Pointer:
		return "pointer"
	case reflect.Struct:
		return "struct"
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "bool"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "int"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "uint"
	case reflect.Float32, reflect.Float64:
		return "float"
	case reflect.Slice, reflect.Array:
		return "slice"
	case reflect.Map:
		return "map"
	case reflect.Interface:
		return "interface"
	}
	panic(fmt.Sprintf("unsupported kind %s of %s", t.Kind(), t))
}

// inner is the type a pointer, slice or map holds (itself for other kinds).
func inner(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array ||
		t.Kind() == reflect.Map {
		t = t.Elem()
	}
	return t
}

type candidate struct {
	key   string
	field Field
	depth int
	typ   reflect.Type
	named bool // the key comes from a json tag
}

// fields lists the JSON keys of struct type t with encoding/json's rules: unexported and `-`
// fields left out, anonymous struct fields without a tag name promoted into t (at a greater
// depth), and among keys of the same name the shallowest wins (ties: the tagged one, else the
// key is dropped).
func fields(t reflect.Type) ([]candidate, error) {
	var all []candidate
	var walk func(t reflect.Type, depth int, via []string) error
	walk = func(t reflect.Type, depth int, via []string) error {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, opts, _ := strings.Cut(tag, ",")
			ft := f.Type
			if f.Anonymous {
				et := ft
				if et.Kind() == reflect.Pointer {
					et = et.Elem()
				}
				if !f.IsExported() && et.Kind() != reflect.Struct {
					continue
				}
				if name == "" && et.Kind() == reflect.Struct && !custom(et) {
					mark := et.Name()
					if ft.Kind() == reflect.Pointer {
						mark = "*" + mark
					}
					if err := walk(et, depth+1, append(append([]string{}, via...), mark)); err != nil {
						return err
					}
					continue
				}
			} else if !f.IsExported() {
				continue
			}
			key := name
			if key == "" {
				key = f.Name
			}
			field := Field{Go: f.Name, Kind: kindOf(ft), Type: goName(inner(ft)), Via: via}
			switch field.Kind {
			case "pointer", "slice", "map":
				field.Elem = kindOf(ft.Elem())
			case "quantity", "time", "marshaler":
				zero, err := json.Marshal(reflect.Zero(ft).Interface())
				if err != nil {
					return fmt.Errorf("%s.%s: zero value: %w", t, f.Name, err)
				}
				field.Zero = zero
			}
			for _, o := range strings.Split(opts, ",") {
				switch o {
				case "omitempty":
					field.OmitEmpty = true
				case "omitzero":
					field.OmitZero = true
				case "string":
					field.AsString = true
				case "", "inline":
				default:
					return fmt.Errorf("%s.%s: unknown json option %q", t, f.Name, o)
				}
			}
			all = append(all, candidate{key: key, field: field, depth: depth, typ: ft, named: name != ""})
		}
		return nil
	}
	if err := walk(t, 0, nil); err != nil {
		return nil, err
	}
	byKey := map[string][]candidate{}
	for _, c := range all {
		byKey[c.key] = append(byKey[c.key], c)
	}
	var out []candidate
	for _, cs := range byKey {
		sort.SliceStable(cs, func(i, j int) bool { return cs[i].depth < cs[j].depth })
		best := cs[:1]
		for _, c := range cs[1:] {
			if c.depth == cs[0].depth {
				best = append(best, c)
			}
		}
		if len(best) > 1 {
			var tagged []candidate
			for _, c := range best {
				if c.named {
					tagged = append(tagged, c)
				}
			}
			if len(tagged) != 1 {
				continue
			}
			best = tagged
		}
		out = append(out, best[0])
	}
	return out, nil
}

// rules walks the struct types reachable from the roots; it also returns them by OpenAPI name.
func rules() (*Table, error) {
	table, _, err := walk()
	return table, err
}

func walk() (*Table, map[string]reflect.Type, error) {
	roots := []reflect.Type{reflect.TypeOf(v1.VirtualMachine{}), reflect.TypeOf(v1.VirtualMachineInstance{})}
	table := &Table{
		About: "Generated by tests/gotags (scripts/gotags.sh, then `kvrs-gotags rules`) from kubevirt.io/api v1.9.0 by reflection: what encoding/json writes for each field. Do not edit by hand.",
		Types: map[string]Type{},
	}
	for _, r := range roots {
		table.Roots = append(table.Roots, openAPIName(r))
	}
	seen := map[reflect.Type]bool{}
	byName := map[string]reflect.Type{}
	stack := append([]reflect.Type{}, roots...)
	for len(stack) > 0 {
		t := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[t] {
			continue
		}
		seen[t] = true
		fs, err := fields(t)
		if err != nil {
			return nil, nil, err
		}
		name := openAPIName(t)
		if prev, ok := table.Types[name]; ok {
			return nil, nil, fmt.Errorf("%s and %s share the OpenAPI name %s", prev.Go, goName(t), name)
		}
		byName[name] = t
		entry := Type{Go: goName(t), Fields: map[string]Field{}}
		for _, c := range fs {
			entry.Fields[c.key] = c.field
			if it := inner(c.typ); it.Kind() == reflect.Struct && !custom(it) && !seen[it] {
				stack = append(stack, it)
			}
		}
		table.Types[name] = entry
	}
	return table, byName, nil
}

func remarshalAs(in io.Reader, out io.Writer) error {
	_, byName, err := walk()
	if err != nil {
		return err
	}
	var docs []struct {
		Type  string          `json:"type"`
		Value json.RawMessage `json:"value"`
	}
	if err := json.NewDecoder(in).Decode(&docs); err != nil {
		return fmt.Errorf("stdin: %w", err)
	}
	results := make([]json.RawMessage, 0, len(docs))
	for i, doc := range docs {
		t, ok := byName[doc.Type]
		if !ok {
			return fmt.Errorf("document %d: no struct type %q in the table", i, doc.Type)
		}
		v := reflect.New(t)
		if err := json.Unmarshal(doc.Value, v.Interface()); err != nil {
			return fmt.Errorf("document %d (%s): %w", i, doc.Type, err)
		}
		b, err := json.Marshal(v.Elem().Interface())
		if err != nil {
			return fmt.Errorf("document %d (%s): %w", i, doc.Type, err)
		}
		results = append(results, b)
	}
	return json.NewEncoder(out).Encode(results)
}

func remarshal(in io.Reader, out io.Writer) error {
	var docs []json.RawMessage
	if err := json.NewDecoder(in).Decode(&docs); err != nil {
		return fmt.Errorf("stdin: %w", err)
	}
	results := make([]json.RawMessage, 0, len(docs))
	for i, doc := range docs {
		var meta metav1.TypeMeta
		if err := json.Unmarshal(doc, &meta); err != nil {
			return fmt.Errorf("document %d: %w", i, err)
		}
		var obj any
		switch meta.Kind {
		case "VirtualMachineInstance":
			obj = &v1.VirtualMachineInstance{}
		case "VirtualMachine":
			obj = &v1.VirtualMachine{}
		default:
			return fmt.Errorf("document %d: kind %q is neither VirtualMachine nor VirtualMachineInstance", i, meta.Kind)
		}
		if err := json.Unmarshal(doc, obj); err != nil {
			return fmt.Errorf("document %d: %w", i, err)
		}
		b, err := json.Marshal(obj)
		if err != nil {
			return fmt.Errorf("document %d: %w", i, err)
		}
		results = append(results, b)
	}
	return json.NewEncoder(out).Encode(results)
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gotags rules|remarshal|remarshal-as")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "rules":
		var table *Table
		if table, err = rules(); err == nil {
			var b []byte
			if b, err = json.MarshalIndent(table, "", "  "); err == nil {
				_, err = os.Stdout.Write(append(b, '\n'))
			}
		}
	case "remarshal":
		err = remarshal(os.Stdin, os.Stdout)
	case "remarshal-as":
		err = remarshalAs(os.Stdin, os.Stdout)
	default:
		fmt.Fprintln(os.Stderr, "usage: gotags rules|remarshal|remarshal-as")
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gotags:", err)
		os.Exit(1)
	}
}
