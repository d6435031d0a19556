package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/rolloutledger/rolloutledger/projections"
	"github.com/rolloutledger/rolloutledger/replay"
)

func newProveCmd(g *globals) *cobra.Command {
	var fact, consistency, check, out string
	var batch, checkpoint uint64
	var heads []string
	cmd := &cobra.Command{
		Use:   "prove --run R --fact ID [--batch K | --checkpoint N] | --run R --consistency A..B | --check FILE --head SIZE:ROOT",
		Short: "Prove that a fact is in the history a batch committed to",
		Long: `prove writes RFC 6962 proofs about a run's fact tree, as JSON, to stdout or --out.

  --fact ID [--batch K | --checkpoint N]
        an inclusion proof that the fact (an event id, or seq:S) is in the
        history batch K (or checkpoint N) committed to; by default the first
        batch or checkpoint that committed to it
  --consistency A..B
        a consistency proof that head B extends head A; a head is batch:K (or
        just K), checkpoint:N, or fact:S (the first head at or after fact S)
  --check FILE --head SIZE:ROOT [--head SIZE:ROOT]
        check a proof file against the head(s) you trust — one for an
        inclusion proof, the old and the new for a consistency proof — with
        nothing else: no Kafka, no archive

Proofs are made from Kafka or, with --archive, from an archive; the history
read must reproduce the recorded head, or prove refuses.`,
		Args: cobra.NoArgs,
	}
	sf := addSourceFlags(cmd)
	cmd.Flags().StringVar(&fact, "fact", "", "the fact to prove: an event id, or seq:S")
	cmd.Flags().Uint64Var(&batch, "batch", 0, "prove against the head batch K committed to")
	cmd.Flags().Uint64Var(&checkpoint, "checkpoint", 0, "prove against the head checkpoint N committed to")
	cmd.Flags().StringVar(&consistency, "consistency", "", "prove that head B extends head A: A..B")
	cmd.Flags().StringVar(&check, "check", "", "check this proof file (with --head)")
	cmd.Flags().StringArrayVar(&heads, "head", nil, "a trusted head SIZE:ROOT for --check (twice for a consistency proof: old, then new)")
	cmd.Flags().StringVarP(&out, "out", "o", "", "write the proof to this file instead of stdout")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		modes := 0
		for _, on := range []bool{fact != "", consistency != "", check != ""} {
			if on {
				modes++
			}
		}
		if modes != 1 {
			return errors.New("give exactly one of --fact, --consistency, --check")
		}
		if check != "" {
			return checkProofFile(g, check, heads)
		}
		if batch > 0 && checkpoint > 0 {
			return errors.New("give --batch or --checkpoint, not both")
		}
		ctx := cmd.Context()
		src, err := sf.open(ctx)
		if err != nil {
			return err
		}
		var p *replay.Proof
		if fact != "" {
			ref, err := replay.ParseFactRef(fact)
			if err != nil {
				return err
			}
			var head replay.HeadRef
			switch {
			case batch > 0:
				head = replay.HeadRef{Kind: "batch", N: batch}
			case checkpoint > 0:
				head = replay.HeadRef{Kind: "checkpoint", N: checkpoint}
			}
			if p, err = replay.ProveInclusion(ctx, src, ref, head); err != nil {
				return err
			}
			fmt.Fprintf(g.stderr, "fact %d (%s %s) is leaf %d of the tree %s %d committed to: %d:%s (%d hashes)\n",
				p.Fact.Seq, p.Fact.Type, p.Fact.ID, p.Fact.LeafIndex, p.Head.Kind, p.Head.Seq, p.Head.Size, p.Head.Root, len(p.Hashes))
		} else {
			a, b, ok := strings.Cut(consistency, "..")
			if !ok {
				return fmt.Errorf("--consistency %q: want A..B", consistency)
			}
			ra, err := replay.ParseHeadRef(a)
			if err != nil {
				return err
			}
			rb, err := replay.ParseHeadRef(b)
			if err != nil {
				return err
			}
			if p, err = replay.ProveConsistency(ctx, src, ra, rb); err != nil {
				return err
			}
			fmt.Fprintf(g.stderr, "%s %d (%d:%s) extends %s %d (%d:%s) (%d hashes)\n", p.New.Kind, p.New.Seq, p.New.Size, p.New.Root,
				p.Old.Kind, p.Old.Seq, p.Old.Size, p.Old.Root, len(p.Hashes))
		}
		b, err := json.MarshalIndent(p, "", "  ")
		if err != nil {
			return err
		}
		b = append(b, '\n')
		if out == "" {
			_, err = g.stdout.Write(b)
			return err
		}
		if err := os.WriteFile(out, b, 0o644); err != nil {
			return err
		}
		fmt.Fprintf(g.stderr, "wrote %s; check it with: rolloutledger prove --check %s --head %s\n", out, out, headArgs(p))
		return nil
	}
	return cmd
}

func headArgs(p *replay.Proof) string {
	if p.Kind == replay.ProofConsistency {
		return fmt.Sprintf("%d:%s --head %d:%s", p.Old.Size, p.Old.Root, p.New.Size, p.New.Root)
	}
	return fmt.Sprintf("%d:%s", p.Head.Size, p.Head.Root)
}

func checkProofFile(g *globals, path string, heads []string) error {
	if len(heads) == 0 {
		return errors.New("--check needs the head(s) you trust: --head SIZE:ROOT")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var p replay.Proof
	if err := json.Unmarshal(b, &p); err != nil {
		return fmt.Errorf("%s is not a proof: %w", path, err)
	}
	trusted := make([]projections.TreeHead, len(heads))
	for i, h := range heads {
		if trusted[i], err = replay.ParseHead(h); err != nil {
			return err
		}
	}
	if err := replay.CheckProof(&p, trusted...); err != nil {
		return &exitError{code: 1, err: err}
	}
	switch p.Kind {
	case replay.ProofInclusion:
		fmt.Fprintf(g.stdout, "OK: fact %d (%s %s, at %d/%d) is in the history of run %s whose head is %d:%s\n",
			p.Fact.Seq, p.Fact.Type, p.Fact.ID, p.Fact.Partition, p.Fact.Offset, p.Run, trusted[0].Size, trusted[0].Root)
	default:
		fmt.Fprintf(g.stdout, "OK: head %d:%s of run %s extends head %d:%s\n", trusted[1].Size, trusted[1].Root, p.Run, trusted[0].Size, trusted[0].Root)
	}
	return nil
}
