package main

import (
	"compress/gzip"
	"encoding/binary"
	"io"
	"os"
)

// Reads length-prefixed inputs on stdin, writes length-prefixed gzip members.
func main() {
	var n uint32
	for binary.Read(os.Stdin, binary.LittleEndian, &n) == nil {
		buf := make([]byte, n)
		io.ReadFull(os.Stdin, buf)
		var out writer
		w, _ := gzip.NewWriterLevel(&out, gzip.BestCompression)
		w.Write(buf)
		w.Close()
		binary.Write(os.Stdout, binary.LittleEndian, uint32(len(out.b)))
		os.Stdout.Write(out.b)
	}
}

type writer struct{ b []byte }

func (w *writer) Write(p []byte) (int, error) { w.b = append(w.b, p...); return len(p), nil }
