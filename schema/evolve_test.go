package schema

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// yamlColumns reads columns as configuration writes them.
func yamlColumns(t testing.TB, text string) []Column {
	t.Helper()
	var cols []Column
	if err := yaml.Unmarshal([]byte(text), &cols); err != nil {
		t.Fatalf("%v in\n%s", err, text)
	}
	return cols
}

// fieldIDs maps every part's path to its id.
func fieldIDs(cols []Column) map[string]int {
	ids := make(map[string]int)
	walkParts(cols, func(c *Column, path string) { ids[path] = c.ID })
	return ids
}

const nestedColumns = `
- {name: a, type: int32}
- {name: tokens, type: "list<int32>"}
- {name: msg, type: "struct<role: string, content: string?>", nullable: true}
- {name: convo, type: "list<struct<role: string, score: float32?>>"}
- {name: z, type: string}
`

// TestWithFieldIDsCatalogRule: a table without ids gets those that
// catalog.BaseSchema has always given it: columns 4+i, then nested parts
// depth first (an element, then its parts; a struct's fields, then their
// parts).
func TestWithFieldIDsCatalogRule(t *testing.T) {
	cols := yamlColumns(t, nestedColumns)
	out, next := WithFieldIDs(cols)
	want := map[string]int{
		"a": 4, "tokens": 5, "msg": 6, "convo": 7, "z": 8,
		"tokens[]": 9, "msg.role": 10, "msg.content": 11,
		"convo[]": 12, "convo[].role": 13, "convo[].score": 14,
	}
	if got := fieldIDs(out); !reflect.DeepEqual(got, want) || next != 15 {
		t.Fatalf("ids %v next %d, want %v next 15", got, next, want)
	}
	if hasFieldIDs(cols) {
		t.Fatal("WithFieldIDs wrote into its argument")
	}
	if mustNew(t, out).Fingerprint() != mustNew(t, cols).Fingerprint() {
		t.Fatal("ids changed the fingerprint")
	}
	again, next := WithFieldIDs(out)
	if !reflect.DeepEqual(again, out) || next != 15 {
		t.Fatalf("ids not kept: next %d", next)
	}
	out[4].ID = 30
	if _, next := WithFieldIDs(out); next != 31 {
		t.Fatalf("next %d after id 30, want 31", next)
	}
	js, _ := json.Marshal(out)
	var back []Column
	if err := json.Unmarshal(js, &back); err != nil || !reflect.DeepEqual(back, out) {
		t.Fatalf("JSON %s does not keep the ids: %v", js, err)
	}
	if _, next := WithFieldIDs([]Column{{Name: "x", Type: String, ID: 4}}); next != 5 {
		t.Fatalf("next %d, want 5", next)
	}
}

func TestNewRefusesFieldIDs(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(ids map[string]*Column)
		want string
	}{
		{"mixed", func(p map[string]*Column) { p["convo[].role"].ID = 0 }, "convo[].role has no field id"},
		{"duplicate", func(p map[string]*Column) { p["msg.role"].ID = 5 }, "tokens and msg.role have the same field id 5"},
		{"reserved", func(p map[string]*Column) { p["a"].ID = 2 }, "a: field id 2 is below 4"},
		{"negative", func(p map[string]*Column) { p["tokens[]"].ID = -1 }, "tokens[]: field id -1 is below 4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cols, _ := WithFieldIDs(yamlColumns(t, nestedColumns))
			parts := make(map[string]*Column)
			walkParts(cols, func(c *Column, path string) { parts[path] = c })
			tc.edit(parts)
			_, err := New(cols)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
			if err := (&Schema{Columns: cols}).Validate(); err == nil {
				t.Fatal("Validate accepts it")
			}
		})
	}
}

// evolveBase is the stored schema of the evolution tests. Its ids:
// prompt 4, score 5, reward 6, resp 7, old 8, tokens 9, messages 10,
// tokens[] 11, messages[] 12, role 13, content 14, mscore 15; next 16.
const evolveBase = `
- {name: prompt, type: string, doc: the prompt}
- {name: score, type: int32}
- {name: reward, type: float64}
- {name: resp, type: string}
- {name: old, type: string, nullable: true}
- {name: tokens, type: "list<int32>"}
- {name: messages, type: "list<struct<role: string, content: string, mscore: float32?>>", nullable: true}
`

// edit returns evolveBase with lines replaced (old line → new lines; an
// empty new removes the line) and extra lines appended.
func edit(t *testing.T, repl map[string]string, extra ...string) string {
	t.Helper()
	text := evolveBase
	for old, repl := range repl {
		if !strings.Contains(text, old) {
			t.Fatalf("evolveBase has no %q", old)
		}
		text = strings.Replace(text, old, repl, 1)
	}
	return text + strings.Join(extra, "\n") + "\n"
}

func storedBase(t *testing.T) []Column {
	cols, next := WithFieldIDs(yamlColumns(t, evolveBase))
	if next != 16 {
		t.Fatalf("next %d", next)
	}
	return cols
}

const messagesLine = `- {name: messages, type: "list<struct<role: string, content: string, mscore: float32?>>", nullable: true}`

func TestEvolveAllowed(t *testing.T) {
	for _, tc := range []struct {
		name    string
		config  string
		changes []string
		ids     map[string]int // some ids of the result
		aliases map[string][]string
		retired []string
		next    int
	}{
		{name: "add column", config: edit(t, nil, `- {name: judge, type: float64, nullable: true}`),
			changes: []string{`add column "judge" (float64, nullable)`}, ids: map[string]int{"judge": 16}, next: 17},
		{name: "add nested column", config: edit(t, nil, `- {name: tags, type: "list<struct<k: string, v: int32?>>", nullable: true}`, `- {name: judge, type: float64, nullable: true}`),
			changes: []string{`add column "tags" (list<struct<k: string, v: int32?>>, nullable)`, `add column "judge" (float64, nullable)`},
			ids:     map[string]int{"tags": 16, "judge": 17, "tags[]": 18, "tags[].k": 19, "tags[].v": 20}, next: 21},
		{name: "widen column", config: edit(t, map[string]string{"type: int32}": "type: int64}"}),
			changes: []string{`widen column "score" from int32 to int64`}, ids: map[string]int{"score": 5}},
		{name: "make nullable", config: edit(t, map[string]string{"{name: reward, type: float64}": "{name: reward, type: float64, nullable: true}"}),
			changes: []string{`make column "reward" nullable`}},
		{name: "rename column", config: edit(t, map[string]string{"{name: resp, type: string}": "{name: response, type: string, renamed_from: resp}"}),
			changes: []string{`rename column "resp" to "response"`}, ids: map[string]int{"response": 7},
			aliases: map[string][]string{"response": {"resp"}}, retired: []string{"resp"}},
		{name: "drop column", config: edit(t, map[string]string{"- {name: old, type: string, nullable: true}\n": ""}),
			changes: []string{`drop column "old"`}, retired: []string{"old"}},
		{name: "add field", config: edit(t, map[string]string{"mscore: float32?>>": "mscore: float32?, tool: string?>>"}),
			changes: []string{`add field "tool" to column "messages"`}, ids: map[string]int{"messages[].tool": 16}, next: 17},
		{name: "widen element", config: edit(t, map[string]string{"list<int32>": "list<int64>"}),
			changes: []string{`widen element of column "tokens" from int32 to int64`}, ids: map[string]int{"tokens[]": 11}},
		{name: "element nullable", config: edit(t, map[string]string{"list<int32>": "list<int32?>"}),
			changes: []string{`make element of column "tokens" nullable`}},
		{name: "widen field", config: edit(t, map[string]string{"mscore: float32?": "mscore: float64?"}),
			changes: []string{`widen field "mscore" of column "messages" from float32 to float64`}, ids: map[string]int{"messages[].mscore": 15}},
		{name: "field nullable", config: edit(t, map[string]string{"content: string,": "content: string?,"}),
			changes: []string{`make field "content" of column "messages" nullable`}},
		{name: "rename field", config: edit(t, map[string]string{messagesLine: `
- name: messages
  type: list
  nullable: true
  element:
    type: struct
    fields:
    - {name: role, type: string}
    - {name: text, type: string, renamed_from: content}
    - {name: mscore, type: float32, nullable: true}`}),
			changes: []string{`rename field "content" of column "messages" to "text"`},
			ids:     map[string]int{"messages[].text": 14}, aliases: map[string][]string{"messages[].text": {"content"}}},
		{name: "doc", config: edit(t, map[string]string{"doc: the prompt": "doc: what the model was asked"}),
			changes: []string{`change the doc of column "prompt"`}},
		{name: "reorder", config: edit(t, map[string]string{"- {name: prompt, type: string, doc: the prompt}\n": ""}, "- {name: prompt, type: string, doc: the prompt}"),
			changes: []string{`reorder the columns to "score", "reward", "resp", "old", "tokens", "messages", "prompt"`}, ids: map[string]int{"prompt": 4}},
		{name: "all at once", config: edit(t, map[string]string{
			"type: int32}":                                  "type: int64}",
			"{name: reward, type: float64}":                 "{name: reward, type: float64, nullable: true}",
			"{name: resp, type: string}":                    "{name: response, type: string, renamed_from: resp}",
			"- {name: old, type: string, nullable: true}\n": "- {name: judge, type: float64, nullable: true}\n",
			"list<int32>":                                   "list<int64?>",
			"mscore: float32?>>":                            "mscore: float64?, tool: string?>>",
		}),
			changes: []string{
				`widen column "score" from int32 to int64`,
				`make column "reward" nullable`,
				`rename column "resp" to "response"`,
				`add column "judge" (float64, nullable)`,
				`widen element of column "tokens" from int32 to int64`,
				`make element of column "tokens" nullable`,
				`widen field "mscore" of column "messages" from float32 to float64`,
				`add field "tool" to column "messages"`,
				`drop column "old"`,
			},
			ids:     map[string]int{"judge": 16, "messages[].tool": 17, "response": 7},
			retired: []string{"resp", "old"}, next: 18},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := Evolve(storedBase(t), nil, yamlColumns(t, tc.config), 16)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(ev.Changes, tc.changes) {
				t.Fatalf("changes\n%q\nwant\n%q", ev.Changes, tc.changes)
			}
			got := fieldIDs(ev.Columns)
			for path, id := range tc.ids {
				if got[path] != id {
					t.Errorf("%s has id %d, want %d (all: %v)", path, got[path], id, got)
				}
			}
			for path, want := range tc.aliases {
				walkParts(ev.Columns, func(c *Column, p string) {
					if p == path && !slices.Equal(c.Aliases, want) {
						t.Errorf("%s has aliases %q, want %q", path, c.Aliases, want)
					}
				})
			}
			if !slices.Equal(ev.Retired, tc.retired) {
				t.Errorf("retired %q, want %q", ev.Retired, tc.retired)
			}
			if want := max(tc.next, 16); ev.NextID != want {
				t.Errorf("next id %d, want %d", ev.NextID, want)
			}
			s := mustNew(t, ev.Columns)
			if want := mustNew(t, yamlColumns(t, tc.config)).Fingerprint(); s.Fingerprint() != want {
				t.Errorf("the result is not the configured schema")
			}
			walkParts(ev.Columns, func(c *Column, p string) {
				if c.RenamedFrom != "" {
					t.Errorf("%s keeps renamed_from", p)
				}
			})
		})
	}
}

// TestEvolveNoChange: the stored schema, configured again (renames kept in
// the configuration after they were made), is no change.
func TestEvolveNoChange(t *testing.T) {
	stored := storedBase(t)
	ev, err := Evolve(stored, []string{"gone"}, yamlColumns(t, evolveBase), 16)
	if err != nil || len(ev.Changes) != 0 || !reflect.DeepEqual(ev.Columns, stored) || ev.NextID != 16 || !slices.Equal(ev.Retired, []string{"gone"}) {
		t.Fatalf("%v %+v", err, ev)
	}
	config := edit(t, map[string]string{"{name: resp, type: string}": "{name: response, type: string, renamed_from: resp}"})
	first, err := Evolve(stored, nil, yamlColumns(t, config), 16)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Evolve(first.Columns, first.Retired, yamlColumns(t, config), first.NextID)
	if err != nil || len(again.Changes) != 0 || !reflect.DeepEqual(again.Columns, first.Columns) {
		t.Fatalf("a rename made before is changed again: %v %q", err, again.Changes)
	}
	// Renamed twice: the configuration names the first name.
	twice := strings.Replace(config, "{name: response, type: string, renamed_from: resp}", "{name: answer, type: string, renamed_from: response}", 1)
	second, err := Evolve(first.Columns, first.Retired, yamlColumns(t, twice), first.NextID)
	if err != nil || !slices.Equal(second.Columns[3].Aliases, []string{"resp", "response"}) || !slices.Equal(second.Retired, []string{"resp", "response"}) {
		t.Fatalf("%v %+v", err, second)
	}
	if _, err := Evolve(second.Columns, second.Retired, yamlColumns(t, strings.Replace(twice, "renamed_from: response", "renamed_from: resp", 1)), second.NextID); err != nil {
		t.Fatalf("renamed_from naming the oldest alias: %v", err)
	}
}

// TestEvolveDroppedNameRetired: a dropped column's name, and a renamed
// column's old name, cannot come back.
func TestEvolveDroppedNameRetired(t *testing.T) {
	dropped, err := Evolve(storedBase(t), nil, yamlColumns(t, edit(t, map[string]string{"- {name: old, type: string, nullable: true}\n": ""})), 16)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Evolve(dropped.Columns, dropped.Retired, yamlColumns(t, evolveBase), dropped.NextID)
	if !errors.Is(err, ErrSchemaChange) || !strings.Contains(err.Error(), `add column "old": the name "old" was used before and is retired`) {
		t.Fatalf("got %v", err)
	}
	// Without the retired list, the aliases still hold the old names.
	first, err := Evolve(storedBase(t), nil, yamlColumns(t, edit(t, map[string]string{"{name: resp, type: string}": "{name: response, type: string, renamed_from: resp}"})), 16)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Evolve(first.Columns, nil, yamlColumns(t, edit(t, map[string]string{"{name: resp, type: string}": "{name: response, type: string}"}, `- {name: resp, type: string, nullable: true}`)), first.NextID)
	if !errors.Is(err, ErrSchemaChange) || !strings.Contains(err.Error(), `the name "resp" was used before and is retired`) {
		t.Fatalf("got %v", err)
	}
}

func TestEvolveRefused(t *testing.T) {
	for _, tc := range []struct {
		name    string
		config  string
		retired []string
		want    string
	}{
		{name: "type change", config: edit(t, map[string]string{"{name: reward, type: float64}": "{name: reward, type: int64}"}),
			want: `schema: change not allowed: column "reward" from float64 to int64 (allowed: add a nullable column or struct field, widen int32→int64 or float32→float64, make a column nullable, rename with renamed_from, drop a column)`},
		{name: "narrow", config: edit(t, map[string]string{"{name: score, type: int32}": "{name: score, type: float64}"}),
			want: `column "score" from int32 to float64`},
		{name: "required added", config: edit(t, nil, `- {name: judge, type: float64}`),
			want: `add column "judge" (float64) as required: a new column must be nullable`},
		{name: "nullable to required", config: edit(t, map[string]string{"{name: old, type: string, nullable: true}": "{name: old, type: string}"}),
			want: `column "old" from nullable to required`},
		{name: "list to struct", config: edit(t, map[string]string{`type: "list<int32>"`: `type: "struct<a: int32>"`}),
			want: `column "tokens" from list<int32> to struct<a: int32>`},
		{name: "element type", config: edit(t, map[string]string{"list<int32>": "list<string>"}),
			want: `element of column "tokens" from int32 to string: a list element can only be widened or made nullable`},
		{name: "field dropped", config: edit(t, map[string]string{"content: string, ": ""}),
			want: `drop field "content" of column "messages": struct fields cannot be dropped`},
		{name: "required field added", config: edit(t, map[string]string{"mscore: float32?>>": "mscore: float32?, tool: string>>"}),
			want: `add field "tool" of column "messages" as required: a new field must be nullable`},
		{name: "field type", config: edit(t, map[string]string{"role: string,": "role: bool,"}),
			want: `field "role" of column "messages" from string to bool`},
		{name: "field nullable to required", config: edit(t, map[string]string{"mscore: float32?": "mscore: float32"}),
			want: `field "mscore" of column "messages" from nullable to required`},
		{name: "retired name", config: edit(t, nil, `- {name: legacy, type: string, nullable: true}`), retired: []string{"legacy"},
			want: `add column "legacy": the name "legacy" was used before and is retired`},
		{name: "rename to a retired name", config: edit(t, map[string]string{"{name: resp, type: string}": "{name: legacy, type: string, renamed_from: resp}"}), retired: []string{"legacy"},
			want: `rename column "resp" to "legacy": the name "legacy" was used before and is retired`},
		{name: "rename to a name in use", config: edit(t, map[string]string{"{name: resp, type: string}": "{name: old, type: string, renamed_from: resp}", "- {name: old, type: string, nullable: true}\n": ""}),
			want: `rename column "resp" to "old": the name "old" is still in use for a different column`},
		{name: "renamed from nothing", config: edit(t, map[string]string{"{name: resp, type: string}": "{name: response, type: string, renamed_from: nope}"}),
			want: `column "response": renamed_from "nope" names nothing in the stored schema`},
		{name: "renamed and kept", config: edit(t, nil, `- {name: response, type: string, nullable: true, renamed_from: resp}`),
			want: `column "response": renamed_from "resp" names a column that is also kept under its own name`},
		{name: "renamed and kept, rename first", config: `- {name: response, type: string, renamed_from: resp}` + evolveBase,
			want: `column "response": renamed_from "resp" names a column that is also kept under its own name`},
		{name: "field renamed from nothing", config: edit(t, map[string]string{messagesLine: `
- name: messages
  type: list
  nullable: true
  element: {type: struct, fields: [{name: role, type: string}, {name: text, type: string, renamed_from: body}, {name: mscore, type: float32, nullable: true}]}`}),
			want: `field "text" of column "messages": renamed_from "body" names nothing in the stored schema`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Evolve(storedBase(t), tc.retired, yamlColumns(t, tc.config), 16)
			if !errors.Is(err, ErrSchemaChange) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got  %v\nwant %s", err, tc.want)
			}
			if !strings.Contains(err.Error(), "(allowed: ") {
				t.Fatalf("%v does not list what is allowed", err)
			}
		})
	}
	// A configuration that is no schema at all is refused as such.
	_, err := Evolve(storedBase(t), nil, yamlColumns(t, evolveBase+"- {name: prompt, type: string}\n"), 16)
	if err == nil || errors.Is(err, ErrSchemaChange) || !strings.Contains(err.Error(), "declared twice") {
		t.Fatalf("got %v", err)
	}
}

// TestColumnRenamedFromYAML: renamed_from is configuration, read and
// written in YAML and never in JSON; id and aliases the other way round.
func TestColumnRenamedFromYAML(t *testing.T) {
	cols := yamlColumns(t, `
- {name: response, type: string, renamed_from: resp}
- name: m
  type: struct
  fields: [{name: text, type: string, renamed_from: body}]
`)
	if cols[0].RenamedFrom != "resp" || cols[1].Fields[0].RenamedFrom != "body" {
		t.Fatalf("%+v", cols)
	}
	out, err := yaml.Marshal(cols)
	if err != nil || !reflect.DeepEqual(yamlColumns(t, string(out)), cols) {
		t.Fatalf("printed form %s does not read back: %v", out, err)
	}
	for _, bad := range []string{`[{name: a, type: string, id: 4}]`, `[{name: a, type: string, aliases: [b]}]`} {
		var c []Column
		err := yaml.Unmarshal([]byte(bad), &c)
		if err == nil || !strings.Contains(err.Error(), "want name, type, nullable, doc, element, fields or renamed_from") {
			t.Errorf("%s: got %v", bad, err)
		}
	}
	withIDs, _ := WithFieldIDs(cols)
	withIDs[0].Aliases = []string{"resp"}
	js, _ := json.Marshal(withIDs)
	if strings.Contains(string(js), "renamed_from") || !strings.Contains(string(js), `"aliases":["resp"]`) {
		t.Fatalf("JSON %s", js)
	}
	var back []Column
	if err := json.Unmarshal(js, &back); err != nil || back[0].ID != 4 || back[1].Fields[0].ID != 6 || !slices.Equal(back[0].Aliases, []string{"resp"}) || back[0].RenamedFrom != "" {
		t.Fatalf("JSON %s reads back as %+v: %v", js, back, err)
	}
	ys, _ := yaml.Marshal(withIDs)
	if strings.Contains(string(ys), "aliases") || strings.Contains(string(ys), "id:") {
		t.Fatalf("YAML carries ids or aliases: %s", ys)
	}
}

// convertFrom and convertTo are every type across every allowed change:
// i32, f32, tok (element), lp (element), msg.score (field) widen; s is
// renamed to s2 and conv[].content to text; j is dropped; b and bin
// become nullable; judge, tags and meta (a new struct) and two struct
// fields are added; the rest is kept.
const convertFrom = `
- {name: i32, type: int32}
- {name: f32, type: float32, nullable: true}
- {name: bin, type: binary}
- {name: ts, type: timestamp}
- {name: s, type: string}
- {name: j, type: json, nullable: true}
- {name: b, type: bool}
- {name: i64, type: int64, nullable: true}
- {name: f64, type: float64}
- {name: tok, type: "list<int32>"}
- {name: lp, type: "list<float32?>", nullable: true}
- {name: msg, type: "struct<role: string, score: float32?>"}
- {name: conv, type: "list<struct<role: string, content: string?>>", nullable: true}
- {name: kept, type: "list<struct<k: string, v: int64?>>"}
`

const convertTo = `
- {name: judge, type: float64, nullable: true}
- {name: i32, type: int64}
- {name: f32, type: float64, nullable: true}
- {name: bin, type: binary, nullable: true}
- {name: ts, type: timestamp}
- {name: s2, type: string, renamed_from: s}
- {name: b, type: bool, nullable: true}
- {name: i64, type: int64, nullable: true}
- {name: f64, type: float64}
- {name: tok, type: "list<int64>"}
- {name: lp, type: "list<float64?>", nullable: true}
- {name: msg, type: "struct<role: string, score: float64?, tool: string?>"}
- name: conv
  type: list
  nullable: true
  element:
    type: struct
    fields:
    - {name: role, type: string}
    - {name: text, type: string, nullable: true, renamed_from: content}
    - {name: n, type: int32, nullable: true}
- {name: kept, type: "list<struct<k: string, v: int64?>>"}
- {name: tags, type: "list<string>", nullable: true}
- {name: meta, type: "struct<a: int32?>", nullable: true}
`

func convertSchemas(t testing.TB) (from, to *Schema) {
	t.Helper()
	stored, next := WithFieldIDs(yamlColumns(t, convertFrom))
	ev, err := Evolve(stored, nil, yamlColumns(t, convertTo), next)
	if err != nil {
		t.Fatal(err)
	}
	return mustNew(t, stored), mustNew(t, ev.Columns)
}

func checkBatch(t testing.TB, b *Batch) {
	t.Helper()
	if len(b.Cols) != len(b.Schema.Columns) {
		t.Fatalf("%d vectors for %d columns", len(b.Cols), len(b.Schema.Columns))
	}
	for c, col := range b.Schema.Columns {
		if err := b.Cols[c].Check(col, b.Len()); err != nil {
			t.Fatal(err)
		}
	}
}

// TestConvert: two rows of every type, converted, value by value.
func TestConvert(t *testing.T) {
	from, to := convertSchemas(t)
	at := time.Date(2025, 3, 1, 12, 0, 0, 5000, time.UTC)
	b, err := from.Build([]Row{
		{"id": "a", "i32": 7, "f32": float32(1.5), "bin": []byte{0, 1}, "ts": at, "s": "x", "j": `{"k":1}`, "b": true, "i64": int64(-3), "f64": 2.25,
			"tok": []int32{1, 2}, "lp": []any{float32(0.5), nil}, "msg": map[string]any{"role": "user", "score": float32(0.25)},
			"conv": []any{map[string]any{"role": "r", "content": "c"}}, "kept": []any{map[string]any{"k": "k1", "v": int64(9)}}},
		{"id": "b", "i32": -1, "bin": []byte{}, "ts": at, "s": "", "b": false, "f64": 0.0,
			"tok": []int32{}, "msg": map[string]any{"role": "tool"}, "kept": []any{}},
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := Convert(b, to)
	if err != nil {
		t.Fatal(err)
	}
	if got.Schema != to || !slices.Equal(got.IDs, []string{"a", "b"}) {
		t.Fatalf("schema %p ids %q", got.Schema, got.IDs)
	}
	checkBatch(t, got)
	want := [][]any{{
		nil, int64(7), 1.5, []byte{0, 1}, at, "x", true, int64(-3), 2.25,
		[]any{int64(1), int64(2)}, []any{0.5, nil}, map[string]any{"role": "user", "score": 0.25, "tool": nil},
		[]any{map[string]any{"role": "r", "text": "c", "n": nil}}, []any{map[string]any{"k": "k1", "v": int64(9)}}, nil, nil,
	}, {
		nil, int64(-1), nil, []byte{}, at, "", false, nil, 0.0,
		[]any{}, nil, map[string]any{"role": "tool", "score": nil, "tool": nil},
		nil, []any{}, nil, nil,
	}}
	for i := range want {
		for c, col := range to.Columns {
			if v := got.Value(c, i); !reflect.DeepEqual(v, want[i][c]) {
				t.Errorf("row %d, column %q: %#v, want %#v", i, col.Name, v, want[i][c])
			}
		}
	}
	// Unchanged vectors are shared, not copied.
	if &got.Cols[to.Index("ts")].I64[0] != &b.Cols[from.Index("ts")].I64[0] ||
		&got.Cols[to.Index("kept")].Elem.Fields[0].Str[0] != &b.Cols[from.Index("kept")].Elem.Fields[0].Str[0] {
		t.Error("an unchanged vector was copied")
	}
	// Appending to the source or to the converted batch, whose vectors
	// share values, leaves the other as it was.
	src := from.NewBatch(8)
	src.AppendRow(b, 0)
	src.AppendRow(b, 1)
	conv, err := Convert(src, to)
	if err != nil {
		t.Fatal(err)
	}
	src.AppendRow(src, 0)
	conv.AppendRow(conv, 1)
	if v, w := src.Value(from.Index("s"), 2), conv.Value(to.Index("s2"), 2); v != "x" || w != "" {
		t.Fatalf("appended %q and %q, want \"x\" and \"\"", v, w)
	}
	checkBatch(t, src)
	checkBatch(t, conv)
	if same, err := Convert(b, from); same != b || err != nil {
		t.Fatalf("to its own schema: %p %v", same, err)
	}
	twin := mustNew(t, copyColumns(from.Columns))
	if same, err := Convert(b, twin); same != b || err != nil {
		t.Fatalf("to an identical schema: %p %v", same, err)
	}
}

// TestConvertWithoutIDs: a schema without ids is taken with WithFieldIDs'.
func TestConvertWithoutIDs(t *testing.T) {
	plain := mustNew(t, yamlColumns(t, convertFrom))
	from, to := convertSchemas(t)
	b, err := plain.Build(randomRows(rand.New(rand.NewPCG(3, 4)), plain, 5))
	if err != nil {
		t.Fatal(err)
	}
	got, err := Convert(b, to)
	if err != nil {
		t.Fatal(err)
	}
	checkBatch(t, got)
	if same, err := Convert(b, from); same != b || err != nil {
		t.Fatalf("a schema and its ids: %p %v", same, err)
	}
}

func TestConvertRefused(t *testing.T) {
	from, to := convertSchemas(t)
	b, err := to.Build([]Row{{"id": "a", "i32": 1, "ts": time.Unix(0, 0), "s2": "x", "f64": 1.0, "tok": []any{}, "msg": map[string]any{"role": "r"}, "kept": []any{}}})
	if err != nil {
		t.Fatal(err)
	}
	// Back to the older schema: b and bin hold nulls, i32 would narrow.
	for _, tc := range []struct {
		cols string
		want string
	}{
		{convertFrom, "i32: cannot convert int64 to int32"},
		{strings.NewReplacer("{name: i32, type: int32}", "{name: i32, type: int64}", "{name: f32, type: float32,", "{name: f32, type: float64,").Replace(convertFrom),
			"bin: row 0 is null, but it is not nullable"},
	} {
		back, _ := WithFieldIDs(yamlColumns(t, tc.cols))
		_, err := Convert(b, mustNew(t, back))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want %q", err, tc.want)
		}
	}
	// A new column that is not nullable cannot be made up.
	cols := copyColumns(to.Columns)
	cols[0].Nullable = false
	src, err := from.Build(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Convert(src, mustNew(t, cols)); err == nil || !strings.Contains(err.Error(), "judge is not in the batch's schema and not nullable") {
		t.Errorf("got %v", err)
	}
	cols = copyColumns(to.Columns)
	cols[to.Index("msg")].Fields[2].Nullable = false
	if _, err := Convert(src, mustNew(t, cols)); err == nil || !strings.Contains(err.Error(), "msg.tool is not in the batch's schema and not nullable") {
		t.Errorf("got %v", err)
	}
}

// expectValue is what Convert makes of v, a value of from, in to: by the
// values, not the vectors.
func expectValue(v any, from, to *Column) any {
	switch {
	case v == nil:
		return nil
	case from.Type == Int32 && to.Type == Int64:
		return int64(v.(int32))
	case from.Type == Float32 && to.Type == Float64:
		return float64(v.(float32))
	case to.Type == List:
		out := []any{}
		for _, x := range v.([]any) {
			out = append(out, expectValue(x, from.Element, to.Element))
		}
		return out
	case to.Type == Struct:
		out := map[string]any{}
		for f := range to.Fields {
			tf := &to.Fields[f]
			out[tf.Name] = nil
			for k := range from.Fields {
				if from.Fields[k].ID == tf.ID {
					out[tf.Name] = expectValue(v.(map[string]any)[from.Fields[k].Name], &from.Fields[k], tf)
				}
			}
		}
		return out
	}
	return v
}

// TestConvertRandom: random batches of every type convert to what the
// values say, and pass Check.
func TestConvertRandom(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	from, to := convertSchemas(t)
	for range 100 {
		b, err := from.Build(randomRows(rng, from, rng.IntN(10)))
		if err != nil {
			t.Fatal(err)
		}
		got, err := Convert(b, to)
		if err != nil {
			t.Fatal(err)
		}
		checkBatch(t, got)
		for c := range to.Columns {
			tc := &to.Columns[c]
			j := slices.IndexFunc(from.Columns, func(x Column) bool { return x.ID == tc.ID })
			for i := range b.Len() {
				var want any
				if j >= 0 {
					want = expectValue(b.Value(j, i), &from.Columns[j], tc)
				}
				if v := got.Value(c, i); !reflect.DeepEqual(v, want) {
					t.Fatalf("row %d, column %q: %#v, want %#v", i, tc.Name, v, want)
				}
			}
		}
	}
}
