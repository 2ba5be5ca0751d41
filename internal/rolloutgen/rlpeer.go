package rolloutgen

import (
	"time"

	"github.com/rollwal/rollwal/schema"
)

// RLPeerRow is a row of RLSchema as a Go struct, tagged so that
// parquet-go's GenericWriter writes the layout rollwal's generations have:
// the bare peer that benchmarks pair the writer with.
type RLPeerRow struct {
	ID             string      `parquet:"id"`
	PromptTokens   []int32     `parquet:"prompt_tokens,list"`
	ResponseTokens []int32     `parquet:"response_tokens,list"`
	Logprobs       []float32   `parquet:"logprobs,list"`
	Messages       []RLPeerMsg `parquet:"messages,list"`
	Reward         *float64    `parquet:"reward,optional"`
	PolicyVersion  int64       `parquet:"policy_version"`
	Env            string      `parquet:"env"`
	CreatedAt      int64       `parquet:"created_at,timestamp(microsecond)"`
	Seq            uint64      `parquet:"_seq,delta"`
	Epoch          uint64      `parquet:"_epoch,delta"`
}

// RLPeerMsg is one chat message of an RLPeerRow.
type RLPeerMsg struct {
	Role    string `parquet:"role"`
	Content string `parquet:"content"`
}

// RLPeer returns an RLRow as an RLPeerRow at WAL position seq.
func RLPeer(r schema.Row, seq uint64) RLPeerRow {
	p := RLPeerRow{ID: r["id"].(string), PromptTokens: r["prompt_tokens"].([]int32), ResponseTokens: r["response_tokens"].([]int32),
		Logprobs: r["logprobs"].([]float32), PolicyVersion: r["policy_version"].(int64), Env: r["env"].(string),
		CreatedAt: r["created_at"].(time.Time).UnixMicro(), Seq: seq, Epoch: 1}
	if reward, ok := r["reward"].(float64); ok {
		p.Reward = &reward
	}
	for _, m := range r["messages"].([]map[string]any) {
		p.Messages = append(p.Messages, RLPeerMsg{Role: m["role"].(string), Content: m["content"].(string)})
	}
	return p
}

// RLValueBytes is the bytes of an RLRow's values: 4 a token and
// log-probability, the text of ids, messages and env, 8 a scalar.
func RLValueBytes(r schema.Row) int64 {
	n := int64(len(r["id"].(string))+len(r["env"].(string))) + 3*8
	n += 4 * int64(len(r["prompt_tokens"].([]int32))+len(r["response_tokens"].([]int32))+len(r["logprobs"].([]float32)))
	for _, m := range r["messages"].([]map[string]any) {
		n += int64(len(m["role"].(string)) + len(m["content"].(string)))
	}
	return n
}
