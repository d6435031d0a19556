package dataset

import (
	"fmt"
	"os"
	"path/filepath"
)

// createBeside makes the temporary file, beside path, that a file of an
// export is written to before commitFile renames it into place; a reader
// never sees a half-written file.
func createBeside(path string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	return os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
}

// commitFile ends the write of tmp, whose error so far is err: it syncs
// it, makes it readable by all (CreateTemp made it private; an export is
// for sharing, as an archive is), closes it and renames it to path. On any
// error tmp is closed and the error names path; the caller removes tmp.
func commitFile(tmp *os.File, path string, err error) error {
	if err == nil {
		err = tmp.Sync()
	}
	if err == nil {
		err = tmp.Chmod(0o644)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("dataset: write %s: %w", path, err)
	}
	return nil
}
