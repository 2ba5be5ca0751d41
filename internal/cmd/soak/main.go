// Command soak runs the writer process under abuse for a while and checks
// the base table exactly (package internal/soak). scripts/soak builds the
// writer and runs it:
//
//	bash scripts/soak 1h
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/rollwal/rollwal/internal/soak"
)

func main() {
	var cfg soak.Config
	var shards, jsonOut string
	flag.StringVar(&cfg.Writer, "writer", "", "the writer binary (required)")
	flag.StringVar(&cfg.Dir, "dir", "", "data directory, created empty (required)")
	flag.DurationVar(&cfg.Duration, "duration", 2*time.Minute, "how long producers run")
	flag.StringVar(&shards, "shards", "s0,s1,s2,s3", "shards the serve hosts")
	flag.IntVar(&cfg.Producers, "producers", 8, "producer sessions")
	flag.IntVar(&cfg.Rate, "rate", 2000, "rows per second of all producers at most (negative: unpaced)")
	flag.DurationVar(&cfg.KillEvery, "kill-every", 30*time.Second, "stop the serve this often (the second of every four SIGTERM, else SIGKILL); negative never")
	flag.IntVar(&cfg.SlowClients, "slow-clients", 64, "slow connections kept open")
	flag.StringVar(&jsonOut, "json", "", "also write the report as JSON to this file")
	flag.Parse()
	cfg.Shards = strings.Split(shards, ",")
	cfg.Log = os.Stderr

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := soak.Run(ctx, cfg)
	if rep != nil {
		rep.Print(os.Stdout, 30)
		if jsonOut != "" {
			if b, jerr := json.MarshalIndent(rep, "", "  "); jerr == nil {
				os.WriteFile(jsonOut, b, 0o644)
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("soak: every acknowledged row is in the base exactly once; nothing else is")
}
