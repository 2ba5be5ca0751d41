package rest

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/rollwal/rollwal/catalog"
	"github.com/rollwal/rollwal/schema"
)

// TestRESTServesSchemaVersions: after a commit in schema version 2, the
// table the REST catalog serves has schema 1 current, both schemas in its
// list, and the name mapping with the renamed column's old name; iceberg-go
// loads it through REST with the new schema.
func TestRESTServesSchemaVersions(t *testing.T) {
	e := newEnv(t, Options{})
	e.fill()
	cols, next := schema.WithFieldIDs(schema.Rollout().Columns)
	cols[0].Name, cols[0].Aliases = "question", []string{"prompt"}
	cols = append(cols, schema.Column{Name: "score", Type: schema.Float64, Nullable: true, ID: next})
	v2, err := schema.New(cols)
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.cat.PrepareBaseCommit(e.ctx, e.ident, catalog.BaseCommit{Schema: &catalog.SchemaVersion{Version: 2, Schema: v2}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.cat.Apply(e.ctx, p); err != nil {
		t.Fatal(err)
	}

	a := e.do(http.MethodGet, "/v1/namespaces/rollwal/tables/t", "")
	if a.code != http.StatusOK {
		t.Fatalf("load table: %d %s", a.code, a.body)
	}
	var got struct {
		Metadata struct {
			CurrentSchemaID int `json:"current-schema-id"`
			Schemas         []struct {
				SchemaID int `json:"schema-id"`
				Fields   []struct {
					ID   int    `json:"id"`
					Name string `json:"name"`
				} `json:"fields"`
			} `json:"schemas"`
			Properties map[string]string `json:"properties"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(a.body, &got); err != nil {
		t.Fatal(err)
	}
	m := got.Metadata
	if m.CurrentSchemaID != 1 || len(m.Schemas) != 2 || m.Schemas[0].SchemaID != 0 || m.Schemas[1].SchemaID != 1 {
		t.Fatalf("current schema %d, schemas %+v; want 1 of [0 1]", m.CurrentSchemaID, m.Schemas)
	}
	if f := m.Schemas[1].Fields[1]; f.ID != 4 || f.Name != "question" {
		t.Fatalf("schema 1 field 1 is %+v, want 4 question", f)
	}
	var mapping []struct {
		ID    int      `json:"field-id"`
		Names []string `json:"names"`
	}
	if err := json.Unmarshal([]byte(m.Properties["schema.name-mapping.default"]), &mapping); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range mapping {
		found = found || f.ID == 4 && len(f.Names) == 2 && f.Names[0] == "question" && f.Names[1] == "prompt"
	}
	if !found {
		t.Fatalf("name mapping %+v has no 4 → [question prompt]", mapping)
	}

	tbl, err := e.client().LoadTable(e.ctx, e.ident)
	if err != nil {
		t.Fatal(err)
	}
	if sc := tbl.Schema(); sc.ID != 1 {
		t.Fatalf("iceberg-go through REST: schema %d, want 1", sc.ID)
	} else if f, ok := sc.FindFieldByName("score"); !ok || f.ID != next {
		t.Fatalf("iceberg-go through REST: score %+v %v", f, ok)
	}
}
