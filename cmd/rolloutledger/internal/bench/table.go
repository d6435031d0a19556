package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
)

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes the report as one table, then each figure's command
// and note.
func (r *Report) WriteTable(w io.Writer) error {
	m := r.Machine
	fmt.Fprintf(w, "machine: %d CPUs (%s), %s memory, %s; %s; %s; load %s\n", m.CPUs, m.CPU, m.MemoryGB, m.Go, m.Kafka, m.Postgres, m.Load)
	mode := "full"
	if r.Short {
		mode = "short (sizes too small for the figures to mean anything)"
	}
	fmt.Fprintf(w, "mode: %s, %d run(s) per figure, took %s\n\n", mode, r.Runs, r.Duration)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "#\tfigure\tmedian\tmin–max\tunit\tgoal\tratio\tmet\t")
	for i, f := range r.Figures {
		if f.Skipped {
			fmt.Fprintf(tw, "%d\t%s\t–\t–\t%s\t%s\t–\tskipped\t\n", i+1, f.Name, f.Unit, f.Goal)
			continue
		}
		ratio, met := "–", "–"
		if f.Ratio != nil {
			ratio = fmt.Sprintf("%.2f", *f.Ratio)
		}
		if f.Met != nil {
			met = map[bool]string{true: "yes", false: "NO"}[*f.Met]
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s–%s\t%s\t%s\t%s\t%s\t\n", i+1, f.Name, num(f.Median), num(f.Min), num(f.Max), f.Unit, f.Goal, ratio, met)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nreproduce / notes:")
	for i, f := range r.Figures {
		fmt.Fprintf(w, "%2d. %s\n", i+1, f.Command)
		if f.Note != "" {
			fmt.Fprintf(w, "    %s\n", strings.ReplaceAll(f.Note, "\n", "\n    "))
		}
	}
	return nil
}

// num prints a figure with three significant digits, grouping thousands.
func num(x float64) string {
	a := math.Abs(x)
	switch {
	case a == 0:
		return "0"
	case a >= 1000:
		s := fmt.Sprintf("%.0f", x)
		neg := strings.HasPrefix(s, "-")
		s = strings.TrimPrefix(s, "-")
		var b strings.Builder
		for i, c := range s {
			if i > 0 && (len(s)-i)%3 == 0 {
				b.WriteByte(',')
			}
			b.WriteRune(c)
		}
		if neg {
			return "-" + b.String()
		}
		return b.String()
	case a >= 100:
		return fmt.Sprintf("%.0f", x)
	case a >= 10:
		return fmt.Sprintf("%.1f", x)
	default:
		return fmt.Sprintf("%.2f", x)
	}
}
