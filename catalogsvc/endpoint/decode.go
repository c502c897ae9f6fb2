package endpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// MaxDocumentSize bounds one definition file or PUT body.
const MaxDocumentSize = 1 << 20

// maxDepth bounds nesting while converting YAML, so a hostile document
// cannot exhaust the stack.
const maxDepth = 64

// Format is a serialisation of endpoint definitions. AGIS §10 makes YAML
// and JSON equivalent; AGTP-API App. A.1 adds that any serialisation is
// fine when the in-memory structure conforms.
type Format int

// Formats.
const (
	FormatAuto Format = iota
	FormatJSON
	FormatYAML
)

// FormatOf picks the format from a file name, sniffing the content when
// the extension says nothing.
func FormatOf(name string, data []byte) Format {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".json":
		return FormatJSON
	case ".yaml", ".yml":
		return FormatYAML
	}
	if t := bytes.TrimLeft(data, " \t\r\n"); len(t) > 0 && (t[0] == '{' || t[0] == '[') {
		return FormatJSON
	}
	return FormatYAML
}

// document is a decoded definition document as JSON values, with the
// line of every field when the source was YAML.
type document struct {
	file  string
	value any
	lines map[string]int
}

func (d *document) line(field string) int {
	if d == nil || d.lines == nil {
		return 0
	}
	return d.lines[field]
}

// decode parses data as JSON or YAML into JSON-compatible values
// (map[string]any, []any, string, float64/json.Number, bool, nil).
func decode(file string, data []byte, f Format) (*document, error) {
	if len(data) > MaxDocumentSize {
		return nil, &FieldError{File: file, Rule: "document-too-large", Msg: fmt.Sprintf("the document is %d bytes, more than %d", len(data), MaxDocumentSize)}
	}
	if f == FormatAuto {
		f = FormatOf(file, data)
	}
	doc := &document{file: file}
	if f == FormatJSON {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		if err := dec.Decode(&doc.value); err != nil {
			return nil, &FieldError{File: file, Rule: "json-syntax", Msg: err.Error()}
		}
		if dec.More() {
			return nil, &FieldError{File: file, Rule: "json-syntax", Msg: "trailing data after the JSON document"}
		}
		return doc, nil
	}
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil {
		return nil, &FieldError{File: file, Rule: "yaml-syntax", Msg: err.Error()}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, &FieldError{File: file, Line: extra.Line, Rule: "yaml-multiple-documents", Msg: "one definition document per file (use an endpoints: list for several)"}
	}
	doc.lines = map[string]int{}
	v, err := fromYAML(&root, "", doc.lines, 0)
	if err != nil {
		var fe *FieldError
		if errors.As(err, &fe) {
			fe.File = file
		}
		return nil, err
	}
	doc.value = v
	return doc, nil
}

func fromYAML(n *yaml.Node, path string, lines map[string]int, depth int) (any, error) {
	if depth > maxDepth {
		return nil, &FieldError{Line: n.Line, Field: path, Rule: "too-deep", Msg: fmt.Sprintf("nesting deeper than %d", maxDepth)}
	}
	if path != "" {
		if _, seen := lines[path]; !seen {
			lines[path] = n.Line
		}
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil, nil
		}
		return fromYAML(n.Content[0], path, lines, depth+1)
	case yaml.AliasNode:
		return nil, &FieldError{Line: n.Line, Field: path, Rule: "yaml-alias", Msg: "YAML aliases are not accepted in definitions"}
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode || (k.Tag != "!!str" && k.Tag != "!!int" && k.Tag != "!!bool" && k.Tag != "!!float") {
				return nil, &FieldError{Line: k.Line, Field: path, Rule: "yaml-key", Msg: "mapping keys must be strings"}
			}
			if k.Value == "<<" {
				return nil, &FieldError{Line: k.Line, Field: path, Rule: "yaml-alias", Msg: "YAML merge keys are not accepted in definitions"}
			}
			if _, dup := m[k.Value]; dup {
				return nil, &FieldError{Line: k.Line, Field: join(path, k.Value), Rule: "duplicate-key", Msg: "the key appears twice"}
			}
			cv, err := fromYAML(v, join(path, k.Value), lines, depth+1)
			if err != nil {
				return nil, err
			}
			m[k.Value] = cv
		}
		return m, nil
	case yaml.SequenceNode:
		a := make([]any, 0, len(n.Content))
		for i, c := range n.Content {
			cv, err := fromYAML(c, fmt.Sprintf("%s[%d]", path, i), lines, depth+1)
			if err != nil {
				return nil, err
			}
			a = append(a, cv)
		}
		return a, nil
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!null":
			return nil, nil
		case "!!bool":
			var b bool
			if err := n.Decode(&b); err != nil {
				return nil, &FieldError{Line: n.Line, Field: path, Rule: "yaml-scalar", Msg: err.Error()}
			}
			return b, nil
		case "!!int":
			var i int64
			if err := n.Decode(&i); err != nil {
				return nil, &FieldError{Line: n.Line, Field: path, Rule: "yaml-scalar", Msg: err.Error()}
			}
			return json.Number(strconv.FormatInt(i, 10)), nil
		case "!!float":
			var f float64
			if err := n.Decode(&f); err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
				return nil, &FieldError{Line: n.Line, Field: path, Rule: "yaml-scalar", Msg: "not a finite number"}
			}
			return json.Number(strconv.FormatFloat(f, 'g', -1, 64)), nil
		case "!!str", "":
			return n.Value, nil
		default:
			return nil, &FieldError{Line: n.Line, Field: path, Rule: "yaml-scalar", Msg: fmt.Sprintf("YAML tag %s has no JSON equivalent", n.Tag)}
		}
	}
	return nil, &FieldError{Line: n.Line, Field: path, Rule: "yaml-node", Msg: "unsupported YAML node"}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// DecodeValue decodes a JSON or YAML document (chosen as for definition
// files) into JSON values, with the same limits and errors; for the
// companion documents of an endpoints directory.
func DecodeValue(file string, data []byte) (any, error) {
	doc, err := decode(file, data, FormatAuto)
	if err != nil {
		return nil, err
	}
	return doc.value, nil
}
