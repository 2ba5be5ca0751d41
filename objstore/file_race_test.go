package objstore_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollwal/rollwal/objstore"
	"github.com/rollwal/rollwal/vfs"
)

// Racing creates on one directory: exactly one create of each name wins,
// whether the racers are stores of one process or separate processes, since
// the file backend links its temporary file into place with vfs.FS.Link,
// which never replaces, rather than relying on any lock of its own.

const (
	raceNames = 64
	// raceDirEnv and racerEnv make the test binary a racer process of
	// TestFileCreateAcrossProcesses.
	raceDirEnv = "ROLLWAL_OBJSTORE_RACE_DIR"
	racerEnv   = "ROLLWAL_OBJSTORE_RACER"
)

func raceName(i int) string { return fmt.Sprintf("race/%03d", i) }

// racePayload is what racer writes as object i: its own bytes, of a size
// that varies so that the racers do not finish in lockstep.
func racePayload(racer, i int) []byte {
	line := fmt.Sprintf("racer %d object %d\n", racer, i)
	return bytes.Repeat([]byte(line), 100+97*((racer+i)%7))
}

// raceCreates creates every race name in order as racer and reports, per
// name, nil or the error of its Create.
func raceCreates(s objstore.Store, racer int) []error {
	errs := make([]error, raceNames)
	for i := range raceNames {
		b := racePayload(racer, i)
		errs[i] = s.Create(context.Background(), raceName(i), bytes.NewReader(b), int64(len(b)))
	}
	return errs
}

// checkRace checks the outcomes of racers creating every race name in dir:
// per name exactly one success, ErrExists for the others (outcomes[racer][i]
// is "ok", "exists" or an error text), the winner's bytes in the object,
// and no temporary file left behind.
func checkRace(t *testing.T, dir string, outcomes [][]string) {
	t.Helper()
	s := openFile(t, vfs.Default, dir)
	for i := range raceNames {
		winner := -1
		for racer, o := range outcomes {
			switch o[i] {
			case "ok":
				if winner >= 0 {
					t.Errorf("%s: racers %d and %d both succeeded", raceName(i), winner, racer)
				}
				winner = racer
			case "exists":
			default:
				t.Errorf("%s: racer %d: %s, want success or ErrExists", raceName(i), racer, o[i])
			}
		}
		if winner < 0 {
			t.Errorf("%s: no racer succeeded", raceName(i))
			continue
		}
		got, err := readObject(s, raceName(i))
		if err != nil || !bytes.Equal(got, racePayload(winner, i)) {
			t.Errorf("%s holds %d bytes (%v), not winner %d's", raceName(i), len(got), err, winner)
		}
	}
	entries, err := vfs.Default.List(filepath.Join(dir, "race"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasSuffix(e, objstore.TempSuffix) {
			t.Errorf("temporary file left behind: %s", e)
		}
	}
	if len(entries) != raceNames {
		t.Errorf("%d entries in race/, want %d", len(entries), raceNames)
	}
}

func readObject(s objstore.Store, name string) ([]byte, error) {
	o, err := s.Open(context.Background(), name)
	if err != nil {
		return nil, err
	}
	defer o.Close()
	b := make([]byte, o.Size())
	_, err = o.ReadAt(b, 0)
	return b, err
}

func outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, objstore.ErrExists):
		return "exists"
	}
	return strings.ReplaceAll(err.Error(), "\n", " ")
}

// TestFileRacingStoresOneDirectory: two stores opened on one OS directory
// race to create the same names from two goroutines.
func TestFileRacingStoresOneDirectory(t *testing.T) {
	dir := t.TempDir()
	const racers = 2
	outcomes := make([][]string, racers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for racer := range racers {
		s := openFile(t, vfs.Default, dir)
		wg.Go(func() {
			<-start
			for _, err := range raceCreates(s, racer) {
				outcomes[racer] = append(outcomes[racer], outcome(err))
			}
		})
	}
	close(start)
	wg.Wait()
	checkRace(t, dir, outcomes)
}

// TestFileCreateAcrossProcesses: racer processes (this test binary run
// again as TestFileCreateAcrossProcesses with raceDirEnv set) race to
// create the same names in one directory; no lock of a process can order
// them.
func TestFileCreateAcrossProcesses(t *testing.T) {
	if dir := os.Getenv(raceDirEnv); dir != "" {
		runRacerProcess(t, dir)
		return
	}
	dir := t.TempDir()
	const racers = 3
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmds := make([]*exec.Cmd, racers)
	outs := make([]*bytes.Buffer, racers)
	gos := make([]interface{ Close() error }, racers)
	for racer := range racers {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestFileCreateAcrossProcesses$", "-test.count=1")
		cmd.Env = append(os.Environ(), raceDirEnv+"="+dir, racerEnv+"="+strconv.Itoa(racer))
		outs[racer] = &bytes.Buffer{}
		cmd.Stdout, cmd.Stderr = outs[racer], outs[racer]
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[racer], gos[racer] = cmd, stdin
	}
	for _, g := range gos { // closing stdin is the starting shot
		_ = g.Close()
	}
	outcomes := make([][]string, racers)
	for racer, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("racer %d: %v\n%s", racer, err, outs[racer])
		}
		outcomes[racer] = parseRacer(t, racer, outs[racer].String())
	}
	checkRace(t, dir, outcomes)
	wins := make([]int, racers)
	for racer, o := range outcomes {
		for _, s := range o {
			if s == "ok" {
				wins[racer]++
			}
		}
	}
	t.Logf("wins per racer process: %v", wins)
}

// runRacerProcess is the body of a racer process: wait for the starting
// shot (stdin closed), create every race name, print one line per name.
func runRacerProcess(t *testing.T, dir string) {
	racer, err := strconv.Atoi(os.Getenv(racerEnv))
	if err != nil {
		t.Fatalf("%s: %v", racerEnv, err)
	}
	s := openFile(t, vfs.Default, dir)
	_, _ = bufio.NewReader(os.Stdin).ReadByte()
	for i, err := range raceCreates(s, racer) {
		fmt.Printf("result %d %s\n", i, outcome(err))
	}
}

// parseRacer reads a racer process's result lines.
func parseRacer(t *testing.T, racer int, out string) []string {
	t.Helper()
	o := make([]string, raceNames)
	n := 0
	for line := range strings.Lines(out) {
		fields := strings.SplitN(strings.TrimSpace(line), " ", 3)
		if fields[0] != "result" {
			continue
		}
		if len(fields) != 3 {
			t.Fatalf("racer %d: bad line %q", racer, line)
		}
		i, err := strconv.Atoi(fields[1])
		if err != nil || i < 0 || i >= raceNames {
			t.Fatalf("racer %d: bad line %q", racer, line)
		}
		o[i] = fields[2]
		n++
	}
	if n != raceNames {
		t.Fatalf("racer %d reported %d results, want %d:\n%s", racer, n, raceNames, out)
	}
	return o
}
