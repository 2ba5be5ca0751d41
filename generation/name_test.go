package generation

import (
	"math"
	"sort"
	"testing"
)

func TestNameRoundTrip(t *testing.T) {
	cases := []struct {
		gen, epoch uint64
		attempt    string
		want       string
	}{
		{0, 0, "00000000", "g00000000000000000000-e00000000000000000000-00000000.parquet"},
		{42, 7, "0a1b2c3d", "g00000000000000000042-e00000000000000000007-0a1b2c3d.parquet"},
		{math.MaxUint64, math.MaxUint64, "ffffffff", "g18446744073709551615-e18446744073709551615-ffffffff.parquet"},
	}
	for _, tc := range cases {
		name := Name(tc.gen, tc.epoch, tc.attempt)
		if name != tc.want {
			t.Errorf("Name(%d, %d, %q) = %q, want %q", tc.gen, tc.epoch, tc.attempt, name, tc.want)
		}
		gen, epoch, attempt, err := ParseName(name)
		if err != nil || gen != tc.gen || epoch != tc.epoch || attempt != tc.attempt {
			t.Errorf("ParseName(%q) = %d, %d, %q, %v", name, gen, epoch, attempt, err)
		}
	}
	for range 100 {
		a := newAttempt()
		if _, _, got, err := ParseName(Name(1, 2, a)); err != nil || got != a {
			t.Fatalf("random attempt %q does not round-trip: %q %v", a, got, err)
		}
	}
}

func TestNamesSortNumerically(t *testing.T) {
	gens := []uint64{0, 9, 10, 99, 100, 1 << 33, math.MaxUint64}
	var names []string
	for i := len(gens) - 1; i >= 0; i-- {
		names = append(names, Name(gens[i], 1, "abcdef01"))
	}
	sort.Strings(names)
	for i, n := range names {
		if g, _, _, _ := ParseName(n); g != gens[i] {
			t.Fatalf("sorted names out of numeric order: %v", names)
		}
	}
}

func TestParseNameRefusesBadNames(t *testing.T) {
	good := "g00000000000000000042-e00000000000000000007-0a1b2c3d.parquet"
	if _, _, _, err := ParseName(good); err != nil {
		t.Fatal(err)
	}
	bad := []string{
		"",
		"g42-e7-0a1b2c3d.parquet", // not padded
		"g00000000000000000042-e00000000000000000007-0a1b2c3d.parque",
		"g00000000000000000042-e00000000000000000007-0a1b2c3d.parquetx",
		"x00000000000000000042-e00000000000000000007-0a1b2c3d.parquet",
		"g00000000000000000042_e00000000000000000007-0a1b2c3d.parquet",
		"g00000000000000000042-f00000000000000000007-0a1b2c3d.parquet",
		"g00000000000000000042-e00000000000000000007_0a1b2c3d.parquet",
		"g00000000000000000042-e00000000000000000007-0A1B2C3D.parquet", // uppercase hex
		"g00000000000000000042-e00000000000000000007-0a1b2c3g.parquet", // not hex
		"g00000000000000000042-e00000000000000000007-0a1b2c3d.PARQUET",
		"g0000000000000000004x-e00000000000000000007-0a1b2c3d.parquet",
		"g+0000000000000000042-e00000000000000000007-0a1b2c3d.parquet", // sign
		"g-0000000000000000042-e00000000000000000007-0a1b2c3d.parquet",
		"g 0000000000000000042-e00000000000000000007-0a1b2c3d.parquet",
		"g18446744073709551616-e00000000000000000007-0a1b2c3d.parquet", // MaxUint64+1
		"g00000000000000000042-e99999999999999999999-0a1b2c3d.parquet",
		".tmp-" + good,
		"dir/" + good[4:],
		good[:len(good)-8] + ".tmp",
	}
	for _, name := range bad {
		if gen, epoch, attempt, err := ParseName(name); err == nil {
			t.Errorf("ParseName(%q) accepted it: %d %d %q", name, gen, epoch, attempt)
		}
	}
	if !IsTemp(".tmp-"+good) || IsTemp(good) {
		t.Error("IsTemp misclassifies")
	}
}

func TestNamePanicsOnBadAttempt(t *testing.T) {
	for _, a := range []string{"", "abc", "ABCDEF01", "0a1b2c3d4", "0a1b2c3z", "../../x"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Name accepted attempt %q", a)
				}
			}()
			Name(1, 1, a)
		}()
	}
}

func FuzzParseName(f *testing.F) {
	f.Add("g00000000000000000042-e00000000000000000007-0a1b2c3d.parquet")
	f.Add("g18446744073709551615-e18446744073709551615-ffffffff.parquet")
	f.Fuzz(func(t *testing.T, name string) {
		gen, epoch, attempt, err := ParseName(name)
		if err != nil {
			return
		}
		if again := Name(gen, epoch, attempt); again != name {
			t.Fatalf("ParseName(%q) accepted a name Name spells %q", name, again)
		}
	})
}
