package plan

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// designDoc is the repo's design (issue 42): its §4 rule index is Rules.
const designDoc = "../../docs/design.md"

// ruleTable renders Rules as docs/design.md §4 lists them.
func ruleTable() string {
	var b strings.Builder
	b.WriteString("| rule | what | reason codes | pinned by (internal/plan) |\n| --- | --- | --- | --- |\n")
	for _, r := range Rules {
		codes := make([]string, 0, len(r.Reasons))
		for _, c := range r.Reasons {
			codes = append(codes, "`"+string(c)+"`")
		}
		tests := make([]string, 0, len(r.Tests))
		for _, t := range r.Tests {
			tests = append(tests, "`"+t+"`")
		}
		b.WriteString("| " + r.ID + " | " + r.Name + " | " + strings.Join(codes, ", ") + " | " + strings.Join(tests, ", ") + " |\n")
	}
	return b.String()
}

// TestTheDesignsRuleTableIsTheCodes: every reason code this package
// declares belongs to exactly one entry of Rules, every test an entry names
// exists here, and docs/design.md's rule index is Rules (a new code, rule
// or test changes both, or this fails with the table to paste).
func TestTheDesignsRuleTableIsTheCodes(t *testing.T) {
	declared := map[Reason]string{} // value -> constant name
	tests := map[string]bool{}
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if strings.HasSuffix(f, "_test.go") && strings.HasPrefix(d.Name.Name, "Test") {
					tests[d.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					vs, ok := s.(*ast.ValueSpec)
					if !ok || strings.HasSuffix(f, "_test.go") {
						continue
					}
					if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Reason" {
						continue
					}
					for i, n := range vs.Names {
						if lit, ok := vs.Values[i].(*ast.BasicLit); ok {
							v, _ := strconv.Unquote(lit.Value)
							if v != "" {
								declared[Reason(v)] = n.Name
							}
						}
					}
				}
			}
		}
	}
	if len(declared) < 50 {
		t.Fatalf("read %d reason codes from the package's files: the parser missed them", len(declared))
	}
	t.Logf("%d reason codes declared in internal/plan, %d index entries", len(declared), len(Rules))
	seen := map[Reason]string{}
	for _, r := range Rules {
		for _, c := range r.Reasons {
			if other, dup := seen[c]; dup {
				t.Errorf("reason %s is in rule %s and rule %s: one rule each", c, other, r.ID)
			}
			seen[c] = r.ID
			if _, ok := declared[c]; !ok {
				t.Errorf("rule %s names reason %q, which the package does not declare", r.ID, c)
			}
		}
		for _, name := range r.Tests {
			if !tests[name] {
				t.Errorf("rule %s is pinned by %s, which is no test of internal/plan", r.ID, name)
			}
		}
	}
	for c, name := range declared {
		if _, ok := seen[c]; !ok {
			t.Errorf("reason %s (%s) belongs to no entry of plan.Rules (rules.go) and docs/design.md §4", c, name)
		}
	}
	doc, err := os.ReadFile(designDoc)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)<!-- rule index: begin -->\n(.*?)<!-- rule index: end -->`).FindSubmatch(doc)
	if m == nil {
		t.Fatalf("%s has no rule index between its markers", designDoc)
	}
	if got, want := string(m[1]), ruleTable(); got != want {
		t.Errorf("%s §4's rule index is not plan.Rules; it should read:\n%s", designDoc, want)
	}
	if !slices.Equal([]string{Rules[0].ID, Rules[9].ID}, []string{"1", "10"}) {
		t.Errorf("the safety rules are entries 1..10 in order")
	}
}

// TestEveryDesignReferencePointsIntoTheRepo: the code and docs cite the
// design as "docs/design.md §N": each N is a section of docs/design.md, and
// nothing cites the design document the project started from, which is
// not in this repository (issue 42).
func TestEveryDesignReferencePointsIntoTheRepo(t *testing.T) {
	doc, err := os.ReadFile(designDoc)
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^## ([0-9]+)\. `).FindAllStringSubmatch(string(doc), -1) {
		sections[m[1]] = true
	}
	if len(sections) < 10 {
		t.Fatalf("%s: %d numbered sections read", designDoc, len(sections))
	}
	ref := regexp.MustCompile(`design\.md §([0-9]+)`)
	old := regexp.MustCompile(`DESIGN(\.md)? (§|section|rule)`)
	refs := 0
	err = filepath.WalkDir("../..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "bin" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !(strings.HasSuffix(path, ".go") || strings.HasSuffix(path, ".md")) {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range ref.FindAllSubmatch(b, -1) {
			refs++
			if !sections[string(m[1])] {
				t.Errorf("%s cites docs/design.md §%s, which has no such section", path, m[1])
			}
		}
		if loc := old.FindIndex(b); loc != nil {
			t.Errorf("%s cites %q, a document not in this repository: cite docs/design.md", path, b[loc[0]:loc[1]])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if refs < 20 {
		t.Fatalf("%d references to docs/design.md found: the walk missed the repo", refs)
	}
}
