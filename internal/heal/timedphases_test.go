package heal

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestTimedPhasesNameEveryPhaseTimed: every phase the Healer times (a
// h.timed(..., journal.PhaseX, ...) or a PhaseDuration observation of
// journal.PhaseX) is in TimedPhases, whose series the agent creates
// before the first heal; a phase left out would be "no data" on the
// dashboard after an agent's first heal.
func TestTimedPhasesNameEveryPhaseTimed(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	timed := map[string]bool{}
	phaseOf := func(e ast.Expr) string {
		if c, ok := e.(*ast.CallExpr); ok && len(c.Args) == 1 { // string(journal.PhaseX)
			e = c.Args[0]
		}
		if sel, ok := e.(*ast.SelectorExpr); ok && strings.HasPrefix(sel.Sel.Name, "Phase") {
			return sel.Sel.Name
		}
		return ""
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(af, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			switch {
			case sel.Sel.Name == "timed" && len(call.Args) == 3:
				timed[phaseOf(call.Args[1])] = true
			case sel.Sel.Name == "WithLabelValues" && strings.HasSuffix(exprString(sel.X), "PhaseDuration") && len(call.Args) == 2:
				timed[phaseOf(call.Args[1])] = true
			}
			return true
		})
	}
	if len(timed) < 5 {
		t.Fatalf("found %d timed phases in heal's code, want the whole rejoin's: the walk missed them", len(timed))
	}
	byName := map[string]string{"PhaseStopped": "stopped", "PhaseSnapshotted": "snapshotted", "PhaseRemoved": "removed", "PhaseLearnerAdded": "learner-added",
		"PhasePrepared": "prepared", "PhaseMemberStarted": "member-started", "PhasePromoted": "promoted"}
	delete(timed, "") // timed's own observation, of its argument
	for name := range timed {
		p, known := byName[name]
		if !known || !slices.Contains(TimedPhases, p) {
			t.Errorf("heal times %s, not in TimedPhases %v", name, TimedPhases)
		}
	}
}

func exprString(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.SelectorExpr:
		return exprString(e.X) + "." + e.Sel.Name
	case *ast.Ident:
		return e.Name
	}
	return ""
}
