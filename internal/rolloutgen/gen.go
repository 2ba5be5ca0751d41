// Package rolloutgen generates seeded synthetic rollouts for the demo
// command, tests and benchmarks: unique ids and 200–2048-byte payloads of
// compressible text with random bytes sprinkled in. Payloads are never
// zero-filled, which would flatter compression and throughput.
package rolloutgen

import (
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/rollwal/rollwal/schema"
)

var words = strings.Fields(`the model answered question step reasoning reward policy token
value advantage rollout episode agent environment observation action state return gradient
sample batch loss entropy critic actor prompt completion verify correct incorrect partial
math code proof search plan reflect tool call result error retry final answer`)

// Generator yields rollout rows. It is not safe for concurrent use.
type Generator struct {
	rng    *rand.Rand
	prefix string
	next   uint64
}

// New returns a generator whose ids start with prefix.
func New(seed uint64, prefix string) *Generator {
	return &Generator{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), prefix: prefix}
}

// Text returns n bytes of word text with about one random byte in 16
// replaced by a random printable character.
func (g *Generator) Text(n int) string {
	var b strings.Builder
	b.Grow(n + 16)
	for b.Len() < n {
		b.WriteString(words[g.rng.IntN(len(words))])
		b.WriteByte(' ')
	}
	raw := []byte(b.String()[:n])
	for i := range raw {
		if g.rng.IntN(16) == 0 {
			raw[i] = byte(33 + g.rng.IntN(94))
		}
	}
	return string(raw)
}

// Payload returns text of a random length in [200, 2048].
func (g *Generator) Payload() string { return g.Text(200 + g.rng.IntN(1849)) }

// ID returns the next unique id.
func (g *Generator) ID() string {
	g.next++
	return fmt.Sprintf("%s-%012d", g.prefix, g.next)
}

// Row returns the next rollout row of the default schema.
func (g *Generator) Row() schema.Row {
	p := g.Payload()
	cut := len(p) / 4
	return schema.Row{
		"id":         g.ID(),
		"prompt":     p[:cut],
		"completion": p[cut:],
		"reward":     float64(g.rng.IntN(2001)-1000) / 1000,
		"metadata":   fmt.Sprintf(`{"step":%d,"model":"m%d"}`, g.next, g.rng.IntN(4)),
	}
}

// Rows returns the next n rows.
func (g *Generator) Rows(n int) []schema.Row {
	out := make([]schema.Row, n)
	for i := range out {
		out[i] = g.Row()
	}
	return out
}
