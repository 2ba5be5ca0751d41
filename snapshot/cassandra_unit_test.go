package snapshot

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/gocql/gocql"
)

// Tests of the Cassandra backend's pure parts; they need no node.

func i64(v int64) *int64 { return &v }

// TestCASRowOutcome: how one LWT result row is read. The offset column's
// absence (row absent) and its null (guard expired) both mean "claim"; a
// stored 0 is an offset like any other, never null.
func TestCASRowOutcome(t *testing.T) {
	applied := gocql.ColumnInfo{Name: "[applied]"}
	offset := gocql.ColumnInfo{Name: "offset"}
	other := gocql.ColumnInfo{Name: "value"}
	for _, tc := range []struct {
		name string
		cols []gocql.ColumnInfo
		fill func(d []any)
		mine int64
		want casOutcome
	}{
		{"applied", []gocql.ColumnInfo{applied}, func(d []any) { *d[0].(*bool) = true }, 5, casApplied},
		{"absent row: [applied] only", []gocql.ColumnInfo{applied}, func(d []any) {}, 5, casAbsent},
		{"guard expired: null offset", []gocql.ColumnInfo{applied, offset}, func(d []any) {}, 5, casAbsent},
		{"stored above", []gocql.ColumnInfo{applied, offset}, func(d []any) { *d[1].(**int64) = i64(9) }, 5, casBehind},
		{"stored 0 is an offset", []gocql.ColumnInfo{applied, offset}, func(d []any) { *d[1].(**int64) = i64(0) }, 0, casAhead},
		{"stored 0 below", []gocql.ColumnInfo{applied, offset}, func(d []any) { *d[1].(**int64) = i64(0) }, 4, casAhead},
		{"whole row (IF EXISTS)", []gocql.ColumnInfo{applied, other, offset}, func(d []any) {
			if d[1] != nil {
				t.Fatal("non-condition column not skipped")
			}
			*d[2].(**int64) = i64(7)
		}, 3, casBehind},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r casRow
			d := r.dest(tc.cols)
			tc.fill(d)
			if !r.hasApplied {
				t.Fatal("[applied] not recognised")
			}
			if got := r.outcome(tc.mine); got != tc.want {
				t.Fatalf("outcome = %d, want %d", got, tc.want)
			}
		})
	}
	var r casRow
	r.dest([]gocql.ColumnInfo{offset})
	if r.hasApplied {
		t.Fatal("a result without [applied] passes for one")
	}
}

// fakeRequestError is a server error with a given code.
type fakeRequestError int

func (e fakeRequestError) Code() int       { return int(e) }
func (e fakeRequestError) Message() string { return fmt.Sprintf("code %#x", int(e)) }
func (e fakeRequestError) Error() string   { return e.Message() }

// TestWriteErrClassification: only errors that prove the statement never
// ran are definite; every timeout, whatever its kind, is an unknown outcome.
func TestWriteErrClassification(t *testing.T) {
	c := &Cassandra{}
	key := Key{"t", "s", "topic/0"}
	unknown := map[string]error{
		"client timeout":       gocql.ErrTimeoutNoResponse,
		"context deadline":     context.DeadlineExceeded,
		"context canceled":     context.Canceled,
		"CAS write timeout":    &gocql.RequestErrWriteTimeout{WriteType: "CAS"},
		"SIMPLE write timeout": &gocql.RequestErrWriteTimeout{WriteType: "SIMPLE"},
		"CAS write unknown":    &gocql.RequestErrCASWriteUnknown{},
		"unavailable (commit)": &gocql.RequestErrUnavailable{},
		"write failure":        &gocql.RequestErrWriteFailure{},
		"connection closed":    gocql.ErrConnectionClosed,
		"server error":         fakeRequestError(gocql.ErrCodeServer),
		"overloaded":           fakeRequestError(gocql.ErrCodeOverloaded),
		"wrapped timeout":      fmt.Errorf("x: %w", gocql.ErrTimeoutNoResponse),
	}
	for name, err := range unknown {
		if got := c.writeErr("persist", key, 3, err); !errors.Is(got, ErrUnknownOutcome) || !errors.Is(got, err) {
			t.Errorf("%s: %v; want ErrUnknownOutcome wrapping the cause", name, got)
		}
	}
	definite := map[string]error{
		"no connections": gocql.ErrNoConnections,
		"syntax":         fakeRequestError(gocql.ErrCodeSyntax),
		"invalid":        fakeRequestError(gocql.ErrCodeInvalid),
		"unauthorized":   fakeRequestError(gocql.ErrCodeUnauthorized),
	}
	for name, err := range definite {
		if got := c.writeErr("persist", key, 3, err); errors.Is(got, ErrUnknownOutcome) || !errors.Is(got, err) {
			t.Errorf("%s: %v; want a definite error wrapping the cause", name, got)
		}
	}
}

func TestLWTSafeVersion(t *testing.T) {
	for v, want := range map[string]bool{
		"5.0.9": true, "4.0.0": true, "4.1.5": true, "4.0-rc1": true, "6.8.0.4": true,
		"3.11.10": true, "3.11.16": true, "3.0.24": true, "3.0.30": true,
		"3.11.9": false, "3.0.23": false, "3.10": false, "3.1.0": false, "2.2.19": false,
		"": false, "x.y": false,
	} {
		if got := lwtSafeVersion(v); got != want {
			t.Errorf("lwtSafeVersion(%q) = %v, want %v", v, got, want)
		}
	}
}

// TestStatementsNeverBindNullToTheGate: "IF offset <= ?" with a null bound
// value is an InvalidRequest, so the gate's value is always the (validated,
// non-negative) offset; the claim compares with a literal null.
func TestStatementsNeverBindNullToTheGate(t *testing.T) {
	st := newStatements("ks", "t")
	for name, s := range map[string]string{"advance": st.advance, "claim": st.claim} {
		if want := `UPDATE ks.t USING TTL ? SET "offset" = ?, value = ?, metadata = ? WHERE table_name = ? AND shard = ? AND source = ?`; s[:len(want)] != want {
			t.Errorf("%s = %q", name, s)
		}
	}
	if st.claim[len(st.claim)-len(`IF "offset" = null`):] != `IF "offset" = null` {
		t.Errorf("claim = %q", st.claim)
	}
	c := &Cassandra{stmt: st, ttl: 7}
	args := c.writeArgs(Key{"t", "s", "x"}, Snapshot{Offset: 0})
	for i, a := range args {
		if a == nil {
			t.Errorf("arg %d is nil", i)
		}
	}
	if v, ok := args[2].([]byte); !ok || v == nil {
		t.Errorf("empty value bound as %#v; want a non-nil empty blob (cells must co-expire)", args[2])
	}
}
