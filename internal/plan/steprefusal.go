package plan

import "errors"

// ReasonMemberDataMoved: the member's pod, or the pod its StatefulSet would
// re-create, keeps its data elsewhere than where the recovery began (a new
// claim, a claim being deleted, a template mounting another path): the pod
// runtime does not stop it, since the recovery would then quarantine and
// prepare a data dir the pod no longer mounts.
const ReasonMemberDataMoved Reason = "member-data-moved"

// StepRefusal is a refusal found by a step's I/O shell right before it
// acts (what the step would act on is not what was decided on). The
// executor ends the attempt at once with its reason instead of retrying
// the step: the same answer would come again.
type StepRefusal struct {
	Reason Reason
	Err    error
}

func (r *StepRefusal) Error() string { return r.Err.Error() }
func (r *StepRefusal) Unwrap() error { return r.Err }

// Refused is err as a StepRefusal for reason.
func Refused(reason Reason, err error) error { return &StepRefusal{Reason: reason, Err: err} }

// RefusalOf is the StepRefusal err carries, if any.
func RefusalOf(err error) (*StepRefusal, bool) {
	var r *StepRefusal
	ok := errors.As(err, &r)
	return r, ok
}
