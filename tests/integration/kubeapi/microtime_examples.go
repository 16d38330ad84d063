// Prints microtime_examples.json: [input, what kube-apiserver v1.36 stores] for MicroTime
// strings (metav1.MicroTime's JSON decode and encode, k8s.io/apimachinery v0.36.2): valid
// times, edge cases and random edits of valid ones. Errors print as "error: <text>". The
// examples of tests/integration/kubeapi/test_micro_times_are_read_as_go_reads_them.py;
// regenerate with
//   cd tools/kube && go run ../../tests/integration/kubeapi/microtime_examples.go \
//     > ../../tests/integration/kubeapi/microtime_examples.json
package main

import (
	"encoding/json"
	"fmt"
	"math/rand"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func main() {
	r := rand.New(rand.NewSource(2))
	base := []string{"2026-11-24T00:00:00.123456Z", "2026-11-24T00:00:00.123456+01:00", "1999-12-31T23:59:59.999999-05:30"}
	inputs := []string{"2026-11-24T00:00:00Z", "2026-02-29T00:00:00.000000Z", "2024-02-29T00:00:00.000000Z", "0000-01-01T00:00:00.000000Z", "0001-01-01T00:00:00.000000+01:00", "2026-11-24T00:00:00.-12345Z", "2026-11-24T00:00:00.+12345Z", "2026-11-24T00:00:00.000000+25:00", "2026-11-24T00:00:00.000000+01:61", "2026-11-24T00:00:00.000000+01:60", "2026-11-24T00:00:60.000000Z", "2026-11-24T00:60:00.000000Z", "2026-00-24T00:00:00.000000Z", "2026-11-00T00:00:00.000000Z", "2026-11-32T00:00:00.000000Z", "2026-11-24T00:00:00.000000Zx", "2026-11-24t00:00:00.000000Z", "9999-12-31T23:59:59.999999-01:00"}
	chars := "0123456789-:.TZ+ ,x"
	for i := 0; i < 1500; i++ {
		b := []byte(base[r.Intn(len(base))])
		for k := 0; k < 1+r.Intn(2); k++ {
			switch r.Intn(3) {
			case 0:
				b[r.Intn(len(b))] = chars[r.Intn(len(chars))]
			case 1:
				j := r.Intn(len(b))
				b = append(b[:j], b[j+1:]...)
			case 2:
				j := r.Intn(len(b) + 1)
				b = append(b[:j], append([]byte{chars[r.Intn(len(chars))]}, b[j:]...)...)
			}
		}
		inputs = append(inputs, string(b))
	}
	fmt.Println("[")
	for i, in := range inputs {
		var t metav1.MicroTime
		raw, _ := json.Marshal(in)
		out := ""
		if err := json.Unmarshal(raw, &t); err != nil {
			out = "error: " + err.Error()
		} else {
			o, _ := json.Marshal(t)
			_ = json.Unmarshal(o, &out)
		}
		line, _ := json.Marshal([2]string{in, out})
		sep := ","
		if i == len(inputs)-1 {
			sep = ""
		}
		fmt.Printf("%s%s\n", line, sep)
	}
	fmt.Println("]")
}
