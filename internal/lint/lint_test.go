// Package lint holds checks over rollwal's own source code.
//
// The durability argument of every package rests on one rule: files are
// changed only through vfs.FS, so that the strict in-memory FS and the fault
// injector see every create, write, rename and remove. A direct os.Rename
// would slip past the crash tests and silently break that argument, so this
// test fails the build when one appears outside vfs.
package lint

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// mutating lists the functions of package os that change the filesystem.
var mutating = map[string]bool{
	"Create": true, "OpenFile": true, "Rename": true, "Remove": true, "RemoveAll": true,
	"WriteFile": true, "Mkdir": true, "MkdirAll": true, "Truncate": true,
	"Link": true, "Symlink": true,
}

// excludedDirs are module-relative directories allowed to touch the disk
// directly: the vfs itself, benchmarks that compare against peers writing
// through their own I/O, the soak, which drives the real writer process
// on a real directory and writes only its own report, and the test
// summary of scripts/test, which writes only its record of results.
var excludedDirs = []string{"vfs", "bench", "internal/soak", "internal/cmd/soak", "internal/cmd/testsummary"}

// check reports, as "file:line: message", every use of a mutating os
// function in f, through any name f imports "os" under. A call and a
// function value (rename := os.Rename) count alike. A local variable that
// shadows the package name is reported too; rename it.
func check(fset *token.FileSet, f *ast.File) []string {
	var findings []string
	report := func(pos token.Pos, format string, args ...any) {
		findings = append(findings, fmt.Sprintf("%s: %s", fset.Position(pos), fmt.Sprintf(format, args...)))
	}
	names := osImportNames(f, report)
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if pkg, ok := sel.X.(*ast.Ident); ok && names[pkg.Name] && mutating[sel.Sel.Name] {
			report(sel.Pos(), "%s.%s changes the filesystem behind vfs.FS; take a vfs.FS instead", pkg.Name, sel.Sel.Name)
		}
		return true
	})
	return findings
}

// osImportNames returns the names under which f imports "os". A dot
// import would hide the calls from check, so it is reported itself.
func osImportNames(f *ast.File, report func(token.Pos, string, ...any)) map[string]bool {
	names := map[string]bool{}
	for _, imp := range f.Imports {
		if path, _ := strconv.Unquote(imp.Path.Value); path != "os" {
			continue
		}
		switch {
		case imp.Name == nil:
			names["os"] = true
		case imp.Name.Name == ".":
			report(imp.Pos(), `dot import of "os" hides filesystem calls from this check`)
		case imp.Name.Name != "_":
			names[imp.Name.Name] = true
		}
	}
	return names
}

func TestNoDirectFileMutation(t *testing.T) {
	findings, files, err := checkTree(moduleRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	if files == 0 {
		t.Fatal("no Go files found: the walk is broken, not the code clean")
	}
	for _, f := range findings {
		t.Error(f)
	}
}

// checkTree checks every non-test Go file below root outside the excluded
// directories, naming files relative to root. It returns the findings and
// how many files it read.
func checkTree(root string) (findings []string, files int, err error) {
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			return skipDir(root, rel, d.Name())
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, filepath.ToSlash(rel), src, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		findings = append(findings, check(fset, f)...)
		return nil
	})
	return findings, files, err
}

// TestCheckTreeExclusions builds a small module on disk: only the file
// outside the excluded places may be reported.
func TestCheckTreeExclusions(t *testing.T) {
	root := t.TempDir()
	bad := "package p\nimport \"os\"\nfunc f() { _ = os.Remove(\"a\") }\n"
	for name, src := range map[string]string{
		"go.mod":               "module example.com/m\n",
		"engine/bad.go":        bad,
		"engine/bad_test.go":   bad,
		"vfs/os.go":            bad,
		"bench/peer.go":        bad,
		"engine/testdata/x.go": bad,
		"nested/go.mod":        "module example.com/n\n",
		"nested/bad.go":        bad,
		"engine/clean.go":      "package p\n",
	} {
		path := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	findings, files, err := checkTree(root)
	if err != nil {
		t.Fatal(err)
	}
	if files != 2 || len(findings) != 1 || !strings.HasPrefix(findings[0], "engine/bad.go:3:16: os.Remove") {
		t.Fatalf("checked %d files, findings %q; want 2 files and one finding in engine/bad.go", files, findings)
	}
}

// skipDir returns fs.SkipDir for the directories the go tool ignores, the
// excluded ones, and nested modules.
func skipDir(root, rel, name string) error {
	if rel == "." {
		return nil
	}
	if slices.Contains(excludedDirs, filepath.ToSlash(rel)) ||
		strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") ||
		name == "testdata" || name == "vendor" {
		return fs.SkipDir
	}
	if _, err := os.Stat(filepath.Join(root, rel, "go.mod")); err == nil {
		return fs.SkipDir
	}
	return nil
}

// moduleRoot walks up from the test's directory to the one holding go.mod.
func moduleRoot(t *testing.T) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		_, err := os.Stat(filepath.Join(dir, "go.mod"))
		if err == nil {
			return dir
		}
		if !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test directory")
		}
		dir = parent
	}
}

// TestCheckReports proves the checker can fail: each source is parsed from
// memory and must yield exactly the findings listed.
func TestCheckReports(t *testing.T) {
	for _, tc := range []struct {
		name string
		src  string
		want []string // substrings, one per expected finding, in order
	}{
		{
			name: "a direct rename",
			src:  "package p\nimport \"os\"\nfunc f() { _ = os.Rename(\"a\", \"b\") }\n",
			want: []string{"x.go:3:16: os.Rename changes the filesystem"},
		},
		{
			name: "an aliased import",
			src:  "package p\nimport stdos \"os\"\nfunc f() { _ = stdos.WriteFile(\"a\", nil, 0) }\n",
			want: []string{"x.go:3:16: stdos.WriteFile"},
		},
		{
			name: "a function value",
			src:  "package p\nimport \"os\"\nvar rm = os.RemoveAll\nvar mk = os.MkdirAll\n",
			want: []string{"x.go:3:10: os.RemoveAll", "x.go:4:10: os.MkdirAll"},
		},
		{
			name: "a dot import",
			src:  "package p\nimport . \"os\"\nfunc f() { _, _ = Create(\"a\") }\n",
			want: []string{"x.go:2:8: dot import"},
		},
		{
			name: "reads and other packages are fine",
			src:  "package p\nimport (\"os\"; fsys \"io/fs\")\nfunc f() { _, _ = os.Open(\"a\"); _ = os.Getenv(\"X\"); _ = fsys.ValidPath(\"a\") }\n",
		},
		{
			name: "a Rename of another package is fine",
			src:  "package p\nimport vfs \"example.com/vfs\"\nfunc f(fs vfs.FS) { _ = fs.Rename(\"a\", \"b\"); _ = vfs.Remove }\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, "x.go", tc.src, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			got := check(fset, f)
			if len(got) != len(tc.want) {
				t.Fatalf("findings %q, want %d like %q", got, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("finding %q, want it to contain %q", got[i], w)
				}
			}
		})
	}
}
