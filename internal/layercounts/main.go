// Command layercounts measures the tree against issue 26's targets: per
// package, the exported identifiers and the non-test lines; the non-test
// Go files over 600 lines; the non-test functions over 120 lines.
// scripts/layer-counts.sh runs it and adds the repeated-block pairs.
//
//	go run ./internal/layercounts [-list pkg] [ROOT]
//
// The rules, for every directory below ROOT that holds Go files (testdata,
// hidden and underscore directories left out), reading its non-test files
// (*_test.go and export_test.go left out) of every build tag:
//
//   - exported identifiers: each exported name declared at top level (a
//     func without receiver, a type, each name of a var or const spec) and
//     each exported method whose receiver's base type is exported. Struct
//     fields and interface methods are not counted. A name declared in two
//     files under different build tags counts once. A main package exports
//     nothing, so its count is given as "-".
//   - lines: the newline-separated lines of a file, as wc -l counts them.
//   - a function's lines: from the line of its func keyword to the line of
//     its closing brace (its doc comment left out); function literals count
//     toward the function that holds them.
//
// -list pkg prints that package's exported names, one a line.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

const (
	maxExports   = 60
	maxFileLines = 600
	maxFuncLines = 120
)

type pkg struct {
	dir     string
	main    bool
	names   map[string]bool
	lines   int
	bigFile []span
	bigFunc []span
}

type span struct {
	where string
	lines int
}

func main() {
	list := flag.String("list", "", "print the exported names of this package (its directory, as printed)")
	flag.Parse()
	root := "."
	if flag.NArg() > 0 {
		root = flag.Arg(0)
	}
	pkgs, err := measure(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "layercounts:", err)
		os.Exit(1)
	}
	if *list != "" {
		for _, p := range pkgs {
			if p.dir == *list {
				for _, n := range sorted(p.names) {
					fmt.Println(n)
				}
				return
			}
		}
		fmt.Fprintf(os.Stderr, "layercounts: no package %s\n", *list)
		os.Exit(1)
	}
	report(pkgs)
}

// measure reads every package below root.
func measure(root string) ([]*pkg, error) {
	byDir := map[string]*pkg{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		p := byDir[rel]
		if p == nil {
			p = &pkg{dir: rel, names: map[string]bool{}}
			byDir[rel] = p
		}
		return p.read(path, filepath.Join(rel, name))
	})
	if err != nil {
		return nil, err
	}
	var pkgs []*pkg
	for _, p := range byDir {
		pkgs = append(pkgs, p)
	}
	sort.Slice(pkgs, func(i, j int) bool { return pkgs[i].dir < pkgs[j].dir })
	return pkgs, nil
}

// read adds one file's names, lines and long functions to p.
func (p *pkg) read(path, rel string) error {
	src, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
	if err != nil {
		return err
	}
	n := strings.Count(string(src), "\n")
	p.lines += n
	if n > maxFileLines {
		p.bigFile = append(p.bigFile, span{rel, n})
	}
	if f.Name.Name == "main" {
		p.main = true
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if l := fset.Position(d.End()).Line - fset.Position(d.Pos()).Line + 1; l > maxFuncLines {
				p.bigFunc = append(p.bigFunc, span{fmt.Sprintf("%s:%d %s", rel, fset.Position(d.Pos()).Line, funcName(d)), l})
			}
			if !d.Name.IsExported() {
				continue
			}
			if d.Recv == nil {
				p.names[d.Name.Name] = true
			} else if r := recvType(d.Recv.List[0].Type); ast.IsExported(r) {
				p.names[r+"."+d.Name.Name] = true
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() {
						p.names[s.Name.Name] = true
					}
				case *ast.ValueSpec:
					for _, id := range s.Names {
						if id.IsExported() {
							p.names[id.Name] = true
						}
					}
				}
			}
		}
	}
	return nil
}

// recvType is the base type name of a method's receiver.
func recvType(e ast.Expr) string {
	for {
		switch t := e.(type) {
		case *ast.StarExpr:
			e = t.X
		case *ast.IndexExpr:
			e = t.X
		case *ast.IndexListExpr:
			e = t.X
		case *ast.ParenExpr:
			e = t.X
		case *ast.Ident:
			return t.Name
		default:
			return ""
		}
	}
}

func funcName(d *ast.FuncDecl) string {
	if d.Recv == nil {
		return d.Name.Name
	}
	return "(" + recvType(d.Recv.List[0].Type) + ")." + d.Name.Name
}

func sorted(m map[string]bool) []string {
	var s []string
	for k := range m {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}

// report prints the table and the lists, marking what is over a target.
func report(pkgs []*pkg) {
	fmt.Printf("exported identifiers and non-test lines a package (target: about %d exported, session exempt; * over)\n", maxExports)
	over := 0
	for _, p := range pkgs {
		count, mark := "-", ""
		if !p.main {
			count = fmt.Sprint(len(p.names))
			if len(p.names) > maxExports && p.dir != "session" {
				mark = " *"
				over++
			}
		}
		fmt.Printf("  %-28s %4s %6d%s\n", p.dir, count, p.lines, mark)
	}
	fmt.Printf("packages over %d exported (session exempt): %d\n", maxExports, over)

	var files, funcs []span
	for _, p := range pkgs {
		files = append(files, p.bigFile...)
		funcs = append(funcs, p.bigFunc...)
	}
	fmt.Printf("non-test Go files over %d lines: %d\n", maxFileLines, len(files))
	for _, s := range files {
		fmt.Printf("  %s %d\n", s.where, s.lines)
	}
	fmt.Printf("non-test functions over %d lines: %d\n", maxFuncLines, len(funcs))
	for _, s := range funcs {
		fmt.Printf("  %s %d\n", s.where, s.lines)
	}
}
