// Prints quantity_examples.json: [input, stored, stored in a core/v1 ResourceList] for many
// quantity strings, as kube-apiserver v1.36 stores them (JSON decode, RoundUp(-3) for core/v1
// ResourceLists, the protobuf round trip through etcd, JSON encode), with the real library
// (k8s.io/apimachinery v0.36.2). Errors print as "error: <text>". The examples of
// tests/integration/kubeapi/test_quantities_are_stored_canonically.py; regenerate with
//   cd tools/kube && go run ../../tests/integration/kubeapi/quantity_examples.go \
//     > ../../tests/integration/kubeapi/quantity_examples.json
package main

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

func stored(s string, milli bool) string {
	var q resource.Quantity
	if err := json.Unmarshal([]byte(fmt.Sprintf("%q", s)), &q); err != nil {
		return "error: " + err.Error()
	}
	if milli {
		q.RoundUp(-3)
	}
	data, err := q.Marshal() // protobuf, as etcd holds it
	if err != nil {
		return "error: " + err.Error()
	}
	var back resource.Quantity
	if err := back.Unmarshal(data); err != nil {
		return "error: " + err.Error()
	}
	out, _ := json.Marshal(back)
	var text string
	_ = json.Unmarshal(out, &text)
	// the reply of the write itself is the same text (the check the Python port relies on)
	direct, _ := json.Marshal(q)
	if string(direct) != string(out) {
		return "MISMATCH " + string(direct) + " " + string(out)
	}
	return text
}

func main() {
	r := rand.New(rand.NewSource(1))
	inputs := []string{
		"0", "00", "-0", "+0", "0.0", "0n", "0Ki", "0e3", ".0", "0.", "1", "+1", "-1", "01", "001",
		"+5", "-05", "3000", "3k", "16384Mi", "16Gi", "8192Mi", "1024Ki", "1536Ki", "1025Ki",
		"1023Ki", "1Ki", "0.5Ki", "0.5Gi", "1.5Gi", "1.5", "0.5", ".5", "1.", "1.G", "100m",
		"1000m", "1500m", "0.1", "0.001", "0.0001", "1n", "0.1n", "1e-10", "1e3", "1E3", "1e+3",
		"1e0", "10e2", "1e-3", "1.5e3", "1e18", "1e19", "1e21", "1000E", "1E", "1P", "1000P",
		"9223372036854775807", "9223372036854775808", "99999999999999999999", "8Ei", "9Ei",
		"7.99Ei", "1Ei", "123456789012345678", "1234567890123456789", "1.123456789", "0.123456789123",
		"12345678901234567890123", "1e-9", "1e-8", "110", "1100", "1000000", "1M", "1000k",
		"1024", "2048", "1048576", "1073741824", "1Mi", "1024Mi", "1023Mi", "1025Mi", "2Gi",
		"100Gi", "80Gi", "30Gi", "40", "100", "-1Ki", "-1024Ki", "-1.5", "-100m", " 1", "1 ",
		" 1Gi ", "", "abc", "1Qi", "1.2.3", "1e", "--1", "1e1.5", "e3", "1ee3", "1KiB", "1k1",
		"1Kii", "1m3", "+-1", ".", "-.5", "1e4294967296",
		"12.50", "12.500", "1.0", "1.000", "1.000000000", "1.0000000000", "2.5k", "0.25Mi",
		"500u", "5000u", "0.5m", "1.5m", "1e-4", "3e2", "3e-2", "4.5e1", "1e6", "1e9", "2e12",
		"1.5Ki", "1.25Ki", "1023.5Ki", "3Ti", "4096Ki", "4096Gi", "1048576Ki", "0.001Ki",
		"1000000000000Ki", "100000000000000Mi", "1000000000000000000Ki",
		"+", "-", "+.", "-.", "-.5e3", "e", "E", "i", "Ki", "1e99999999999999999999", " ",
		"0x10", "1_000", "1,5", "1.5e3Ki", "1Ki5", "1e3m", "1me3", "1e1e1", "5Mi ", "1.5Ei",
		"123456789012345678901234567890Ki", "0.000000000000000000001", "1234567890123456789.5",
		"12345678901234567890m", "12345678901234567890Mi", "-12345678901234567890Ki",
		"0.0000000001Ki", "99999999999999999999Ei", "1.0Ki", "2.0Mi", "1024.0Ki", "1e-0", "1e+0",
		"1e00", "1e-00", "1E-3", "1.e3", ".e3", "1..5", "1.5.", "+1.5", "-0.0", "000.000",
		"0.000000001", "0.0000000001", "-0.0000000001", "100000000000000000000", "1e18Ki",
		"7Ei", "7.5Ei", "8Ei", "-8Ei", "-9Ei", "9223372036854775807Ki", "1Pi", "1024Pi",
		"1023Ei", "0.999Ki", "1023.999", "1024.001", "1.001Ki", "3.5", "3.50", "12e-1", "123e-2",
	}
	digits := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('0' + r.Intn(10))
		}
		return string(b)
	}
	suffixes := []string{"", "", "", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi",
		"Gi", "Ti", "Pi", "Ei", "e3", "e-3", "E5", "e+2", "e0", "e-12", "e18", "e19", "e-9", "e1",
		"e2", "e-1", "e-2", "e7", "e-7", "e20", "e-20"}
	for i := 0; i < 6000; i++ {
		var b strings.Builder
		switch r.Intn(8) {
		case 0:
			b.WriteString("-")
		case 1:
			b.WriteString("+")
		}
		if r.Intn(6) == 0 {
			b.WriteString(strings.Repeat("0", 1+r.Intn(3)))
		}
		n := r.Intn(8)
		if r.Intn(10) == 0 {
			n = 10 + r.Intn(16)
		}
		b.WriteString(digits(n))
		if r.Intn(3) == 0 {
			b.WriteString(".")
			f := r.Intn(6)
			if r.Intn(8) == 0 {
				f = 6 + r.Intn(10)
			}
			b.WriteString(digits(f))
			if r.Intn(4) == 0 {
				b.WriteString(strings.Repeat("0", 1+r.Intn(3)))
			}
		} else if r.Intn(3) == 0 {
			b.WriteString(strings.Repeat("0", 1+r.Intn(5)))
		}
		b.WriteString(suffixes[r.Intn(len(suffixes))])
		inputs = append(inputs, b.String())
	}
	alphabet := "0123456789.+-eEinumkKMGTP "
	for i := 0; i < 3000; i++ {
		n := 1 + r.Intn(6)
		b := make([]byte, n)
		for j := range b {
			b[j] = alphabet[r.Intn(len(alphabet))]
		}
		inputs = append(inputs, string(b))
	}
	var rows [][3]string
	seen := map[string]bool{}
	for _, in := range inputs {
		if seen[in] {
			continue
		}
		seen[in] = true
		rows = append(rows, [3]string{in, stored(in, false), stored(in, true)})
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetEscapeHTML(false)
	fmt.Println("[")
	for i, row := range rows {
		line, _ := json.Marshal(row)
		sep := ","
		if i == len(rows)-1 {
			sep = ""
		}
		fmt.Printf("%s%s\n", line, sep)
	}
	fmt.Println("]")
}
