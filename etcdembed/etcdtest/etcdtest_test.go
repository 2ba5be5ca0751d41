package etcdtest

import (
	"context"
	"strings"
	"testing"
)

func TestSharedStartsOnceAndNamesAreUnique(t *testing.T) {
	var s Shared
	if err := s.Close(); err != nil {
		t.Fatalf("closing a server never started: %v", err)
	}
	a, b := s.Server(t), s.Server(t)
	if a != b {
		t.Fatal("two servers started for one package")
	}
	if _, err := a.Client().Put(context.Background(), "k", "v"); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	n1, n2 := Name(t, "-x", 100), Name(t, "-x", 100)
	if n1 == n2 {
		t.Fatalf("Name returned %q twice", n1)
	}
	if long := Name(t, strings.Repeat("x", 300), 20); len(long) > 20 {
		t.Fatalf("Name ignored its bound: %d bytes", len(long))
	}
}
