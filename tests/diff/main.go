// kvrs-diff-go answers, with KubeVirt v1.9.0's own Go code, what kvrs answers for a VMI: the
// VMI after virt-api's mutating webhook (or the validating webhook's rejection), the domain XML
// virt-launcher would define, the memory overhead and compute-container resources, and the
// virt-launcher pod. The set-up (cluster configuration, converter context, pod rendering
// parameters) is the one ../shared/oracle/README.txt describes, so on the oracle's inputs it
// reproduces the oracle's files (tests/differential.rs checks that before trusting it).
//
// Usage:
//
//	kvrs-diff-go                    JSON lines on stdin: {"id":..,"vmi":{..},"featureGates":[..],
//	                                "networkBindings":{..}} (networkBindings optional);
//	                                one JSON line per input on stdout (see Answer)
//	kvrs-diff-go bench-convert FILE N
//	                                times N in-process conversions of the defaulted VMI FILE
//	                                (convert, libvirt-domain defaulting, xml.MarshalIndent)
//	kvrs-diff-go bench-convert-serve FILE
//	                                the same as a server: each line N on stdin times N more
//	                                conversions and answers "MEDIAN_NS ALLOCS"
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"

	v1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/log"
)

// Request is one input line.
type Request struct {
	ID           string          `json:"id"`
	VMI          json.RawMessage `json:"vmi"`
	FeatureGates []string        `json:"featureGates"`
	// NetworkBindings is the cluster's network.binding (binding plugins by name), if any.
	NetworkBindings map[string]v1.InterfaceBindingPlugin `json:"networkBindings,omitempty"`
}

// Rejection is the webhook's refusal: its message and causes, as error.txt prints them.
type Rejection struct {
	// Webhook is "validating" or "mutating".
	Webhook string  `json:"webhook"`
	Message string  `json:"message"`
	Causes  []Cause `json:"causes"`
}

// Cause is one metav1.StatusCause.
type Cause struct {
	Field   string `json:"field"`
	Type    string `json:"type"`
	Message string `json:"message"`
}

// Answer is one output line. Exactly one of Defaulted and Rejected is set (or Error, when the
// harness itself could not run the input); the rest only for admitted VMIs, each with its own
// error field when KubeVirt's function failed.
type Answer struct {
	ID            string          `json:"id"`
	Error         string          `json:"error,omitempty"`
	Defaulted     json.RawMessage `json:"defaulted,omitempty"`
	Rejected      *Rejection      `json:"rejected,omitempty"`
	DomainXML     string          `json:"domainXml,omitempty"`
	DomainError   string          `json:"domainError,omitempty"`
	Overhead      string          `json:"overhead,omitempty"`
	OverheadError string          `json:"overheadError,omitempty"`
	Pod           json.RawMessage `json:"pod,omitempty"`
	PodError      string          `json:"podError,omitempty"`
}

func main() {
	// KubeVirt logs every admission and conversion; the answers are the output.
	log.Log.SetIOWriter(io.Discard)
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "bench-convert":
			if len(os.Args) != 4 {
				fatalf("usage: kvrs-diff-go bench-convert FILE N")
			}
			n, err := strconv.Atoi(os.Args[3])
			if err != nil || n <= 0 {
				fatalf("bench-convert: N must be a positive integer, got %q", os.Args[3])
			}
			if err := benchConvert(os.Args[2], n, os.Stdout); err != nil {
				fatalf("bench-convert: %v", err)
			}
			return
		case "bench-convert-serve":
			if len(os.Args) != 3 {
				fatalf("usage: kvrs-diff-go bench-convert-serve FILE")
			}
			if err := benchServe(os.Args[2], os.Stdin, os.Stdout); err != nil {
				fatalf("bench-convert-serve: %v", err)
			}
			return
		case "-h", "--help":
			fmt.Println("usage: kvrs-diff-go < requests.jsonl > answers.jsonl | kvrs-diff-go bench-convert FILE N | kvrs-diff-go bench-convert-serve FILE")
			return
		default:
			fatalf("unknown mode %q (modes: none for JSON lines on stdin, bench-convert FILE N, bench-convert-serve FILE)", os.Args[1])
		}
	}
	in := bufio.NewReaderSize(os.Stdin, 1<<20)
	out := bufio.NewWriter(os.Stdout)
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	h := newHarness()
	for {
		line, err := in.ReadBytes('\n')
		if len(line) > 0 && !(len(line) == 1 && line[0] == '\n') {
			var req Request
			var ans Answer
			if jerr := json.Unmarshal(line, &req); jerr != nil {
				ans = Answer{Error: "bad request line: " + jerr.Error()}
			} else {
				ans = h.answer(req)
			}
			if eerr := enc.Encode(ans); eerr != nil {
				fatalf("writing answer: %v", eerr)
			}
			// One answer per line as soon as it is known: the caller may stream.
			if ferr := out.Flush(); ferr != nil {
				fatalf("writing answer: %v", ferr)
			}
		}
		if err == io.EOF {
			return
		}
		if err != nil {
			fatalf("reading stdin: %v", err)
		}
	}
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "kvrs-diff-go: "+format+"\n", args...)
	os.Exit(2)
}
