package oracleharness

import (
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
)

// Decode reads raw as a T; what names the document in the error.
func Decode[T any](raw json.RawMessage, what string) (*T, error) {
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return &v, nil
}

// DecodeOptional reads raw into v unless it is absent or null (v then keeps its zero value).
func DecodeOptional(raw json.RawMessage, v any, what string) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// Fill decodes each raw object as a T and adds it to store and, when tracker is set, to the
// fake API server (the fixtures do not go through the reactors: they are not the controller's
// calls). keep filters what the cache holds (the API server holds everything).
func Fill[T any, PT interface {
	*T
	runtime.Object
}](raws []json.RawMessage, what string, store cache.Store, tracker k8stesting.ObjectTracker, keep func(PT) bool) error {
	for i, raw := range raws {
		o, err := Decode[T](raw, fmt.Sprintf("%s[%d]", what, i))
		if err != nil {
			return err
		}
		p := PT(o)
		if keep == nil || keep(p) {
			if err := store.Add(p); err != nil {
				return err
			}
		}
		if tracker != nil {
			if err := tracker.Add(p); err != nil {
				return err
			}
		}
	}
	return nil
}
