package dataset

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/simulate"
	"github.com/rolloutledger/rolloutledger/replay"
)

// goldenDigests are the SHA-256 of every file each format writes for
// testdata/golden.rla, a small simulated run with text and cuts
// (TestWriteGoldenArchive). They change only when the format does, on
// purpose: how the rows reach the writers (in memory, spilled, joined as
// written) must not change a byte. GOLDEN_PRINT=1 prints them.
var goldenDigests = map[string]string{
	"atif/out.jsonl": "45f1e0402eab7e15a244032e7264d082f799e0d5f9f6bd143a4f6ee81982d979",
	"hf/README.md":   "bee8e4b95e639fec0d270a3d2e4d7b491bfa53f437bf14a542e76200351b6b7f",
	"hf/data/attempts/train-00000-of-00001.parquet":   "2ea24eb7024d949bc61720b7c14770cc4a46799f8e01f33a176554b6663494af",
	"hf/data/batches/train-00000-of-00001.parquet":    "a9a331a05372689e637984764767b47c0bb879d4d06422c383b9c82f967fc90f",
	"hf/data/samples/train-00000-of-00001.parquet":    "4a1d13fdceafa9768c705325f6387706430db3b6d982f72b9dc8e3e661f9e74d",
	"hf/data/tasks/train-00000-of-00001.parquet":      "2ee1e94e76d9d0966442e776422e696f9146beef9c7a7d4a92beadf62244afc2",
	"hf/data/tool_calls/train-00000-of-00001.parquet": "477dce00c0cb002ca8d644211d2f61daeb1599587a4955e9d81ce1c3d82f6cf0",
	"hf/data/turns/train-00000-of-00001.parquet":      "1ecf0ab1ddf696e025d3562602c7e8864f9168ea49ecdbd45f75a9bb848a03e6",
	"messages/out.jsonl":                              "3cc440450f614d84377504f561ccf5ba2562f5c7bc89c1d5c000288dc94e088f",
	"parquet/attempts.parquet":                        "2ea24eb7024d949bc61720b7c14770cc4a46799f8e01f33a176554b6663494af",
	"parquet/batches.parquet":                         "a9a331a05372689e637984764767b47c0bb879d4d06422c383b9c82f967fc90f",
	"parquet/samples.parquet":                         "4a1d13fdceafa9768c705325f6387706430db3b6d982f72b9dc8e3e661f9e74d",
	"parquet/tasks.parquet":                           "2ee1e94e76d9d0966442e776422e696f9146beef9c7a7d4a92beadf62244afc2",
	"parquet/tool_calls.parquet":                      "477dce00c0cb002ca8d644211d2f61daeb1599587a4955e9d81ce1c3d82f6cf0",
	"parquet/turns.parquet":                           "1ecf0ab1ddf696e025d3562602c7e8864f9168ea49ecdbd45f75a9bb848a03e6",
}

func TestGoldenDigests(t *testing.T) {
	src, err := replay.OpenArchive(filepath.Join("testdata", "golden.rla"))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, format := range Formats {
		res := exportTo(t, src, format, outPath(t.TempDir(), format))
		for _, f := range res.Files {
			got[format+"/"+f.Path] = f.SHA256
			b, err := os.ReadFile(filepath.Join(filepath.Dir(res.Out), filepath.Base(res.Out), f.Path))
			if format == FormatATIF || format == FormatMessages {
				b, err = os.ReadFile(res.Out)
			}
			if err != nil {
				t.Fatal(err)
			}
			if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != f.SHA256 {
				t.Errorf("%s/%s: the result names sha256 %s, the file's is %x", format, f.Path, f.SHA256, sum)
			}
		}
	}
	if os.Getenv("GOLDEN_PRINT") != "" {
		var keys []string
		for k := range got {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		var b strings.Builder
		for _, k := range keys {
			b.WriteString("\t\"" + k + "\": \"" + got[k] + "\",\n")
		}
		t.Logf("\n%s", b.String())
	}
	for k, w := range goldenDigests {
		if got[k] != w {
			t.Errorf("%s: sha256 %s, want %s", k, got[k], w)
		}
	}
	if len(got) != len(goldenDigests) {
		t.Errorf("%d files written, %d known", len(got), len(goldenDigests))
	}
}

// TestWriteGoldenArchive writes testdata/golden.rla when GOLDEN_WRITE=1.
func TestWriteGoldenArchive(t *testing.T) {
	if os.Getenv("GOLDEN_WRITE") == "" {
		t.Skip("GOLDEN_WRITE=1 writes testdata/golden.rla")
	}
	src := planSourceWith(t, simulate.Options{Seed: 11, Tasks: 6, Steps: 2, BatchGroups: 1, MaxTurns: 6}, "golden-1", withCuts)
	if _, err := replay.Export(context.Background(), src, filepath.Join("testdata", "golden.rla"), replay.ExportOptions{}); err != nil {
		t.Fatal(err)
	}
}
