package rolloutgen

import (
	"fmt"
	"math"
	"time"

	"github.com/rollwal/rollwal/schema"
)

// RLSchema is the schema of a realistic RL rollout: token ids of the
// prompt and the response, the response's per-token log-probabilities, the
// chat it came from, a reward and a few scalars.
func RLSchema() *schema.Schema {
	cols := []schema.Column{
		listOf("prompt_tokens", schema.Int32, "prompt token ids"),
		listOf("response_tokens", schema.Int32, "response token ids"),
		listOf("logprobs", schema.Float32, "log-probability of each response token"),
		{Name: "messages", Type: schema.List, Doc: "the conversation, in order", Element: &schema.Column{
			Type: schema.Struct, Fields: []schema.Column{{Name: "role", Type: schema.String}, {Name: "content", Type: schema.String}},
		}},
		{Name: "reward", Type: schema.Float64, Nullable: true},
		{Name: "policy_version", Type: schema.Int64},
		{Name: "env", Type: schema.String},
		{Name: "created_at", Type: schema.Timestamp},
	}
	s, err := schema.New(cols)
	if err != nil {
		panic(err) // a constant schema that does not validate is a programming error
	}
	return s
}

func listOf(name string, t schema.Type, doc string) schema.Column {
	return schema.Column{Name: name, Type: schema.List, Doc: doc, Element: &schema.Column{Type: t}}
}

// Token lengths of an RLRow.
const (
	MinPromptTokens, MaxPromptTokens     = 256, 2048
	MinResponseTokens, MaxResponseTokens = 256, 4096
	vocabulary                           = 151_000 // about a current tokenizer's
)

var roles = []string{"system", "user", "assistant", "tool"}

// RLRow returns the next row of RLSchema: 256–2,048 prompt tokens,
// 256–4,096 response tokens with their log-probabilities, 1–16 messages.
// Token ids follow a skewed distribution, as real text does, so that
// encodings are measured on data that compresses like the real thing.
func (g *Generator) RLRow() schema.Row {
	resp := g.tokens(MinResponseTokens, MaxResponseTokens)
	lp := make([]float32, len(resp))
	for i := range lp {
		lp[i] = float32(-g.rng.ExpFloat64() * 0.7)
	}
	msgs := make([]map[string]any, 1+g.rng.IntN(16))
	for i := range msgs {
		msgs[i] = map[string]any{"role": roles[min(i, 1+i%3)], "content": g.Text(40 + g.rng.IntN(400))}
	}
	return schema.Row{
		"id":              g.ID(),
		"prompt_tokens":   g.tokens(MinPromptTokens, MaxPromptTokens),
		"response_tokens": resp,
		"logprobs":        lp,
		"messages":        msgs,
		"reward":          float64(g.rng.IntN(2001)-1000) / 1000,
		"policy_version":  int64(g.next / 1000),
		"env":             fmt.Sprintf("env-%d", g.rng.IntN(8)),
		"created_at":      time.UnixMicro(1_780_000_000_000_000 + int64(g.next)*1000).UTC(),
	}
}

// tokens returns between lo and hi token ids, Zipf-like.
func (g *Generator) tokens(lo, hi int) []int32 {
	out := make([]int32, lo+g.rng.IntN(hi-lo+1))
	for i := range out {
		out[i] = int32(math.Pow(float64(vocabulary), g.rng.Float64())) - 1
	}
	return out
}

// RLRows returns the next n rows of RLSchema.
func (g *Generator) RLRows(n int) []schema.Row {
	out := make([]schema.Row, n)
	for i := range out {
		out[i] = g.RLRow()
	}
	return out
}
