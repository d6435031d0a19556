package projections

// Admission (docs/design.md §6.6, rule 6).
//
// Admission is decided at the completion of probe groups, over all attempts
// of the task's completed probe groups, at the first point where they
// number at least min_probes. A probe group counts toward its task when it
// completes: its included attempts (the holder of each complete slot, also
// when a close left it with none) are the task's probes,
// those that passed its passes — also when it was closed with fewer than
// min_group of them, or all of them scored alike: those are verdicts on the
// task like any other. Counting whole completed groups, rather
// than rewards as they arrive, makes the tally independent of how the
// producers' facts interleave. At the first completion that brings a task
// to min_probes probes the task is decided, once: admitted when
// passes/probes lies within pass_band (both ends included), else rejected.
// A decided task's tally no longer moves.

func (c *applyCtx) countProbes(task string, kept []member) error {
	t, err := c.task(task)
	if err != nil {
		return err
	}
	if t.decision != admissionPending {
		return nil
	}
	for _, m := range kept {
		t.probes++
		if m.a.passed {
			t.passes++
		}
	}
	cfg, err := c.config()
	if err != nil {
		return err
	}
	if t.probes >= int64(cfg.MinProbes) {
		rate := float64(t.passes) / float64(t.probes)
		data := Admission{Task: task, Probes: t.probes, Passes: t.passes, PassRate: rate}
		if cfg.PassBand[0] <= rate && rate <= cfg.PassBand[1] {
			t.decision = admissionAdmitted
			c.h.admitted++
			err = c.emit(KindTaskAdmitted, c.h.admitted, data, nil)
		} else {
			t.decision = admissionRejected
			c.h.rejected++
			err = c.emit(KindTaskRejected, c.h.rejected, data, nil)
		}
		if err != nil {
			return err
		}
	}
	return c.putTask(task, &t)
}
