package rolloutgen

import "testing"

// TestRLRowsBuild: the realistic rows are valid rows of RLSchema, in the
// stated ranges.
func TestRLRowsBuild(t *testing.T) {
	g := New(7, "rl")
	s := RLSchema()
	rows := g.RLRows(50)
	b, err := s.Build(rows)
	if err != nil {
		t.Fatal(err)
	}
	pt, rt, lp := s.Index("prompt_tokens"), s.Index("response_tokens"), s.Index("logprobs")
	for i := range rows {
		p, r, l := len(b.Value(pt, i).([]any)), len(b.Value(rt, i).([]any)), len(b.Value(lp, i).([]any))
		if p < MinPromptTokens || p > MaxPromptTokens || r < MinResponseTokens || r > MaxResponseTokens || l != r {
			t.Fatalf("row %d: %d prompt tokens, %d response tokens, %d logprobs", i, p, r, l)
		}
	}
}
