package rego

import (
	"context"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/topdown"
)

// dataCache answers the evaluator's reads of base documents (data.hosts.registries, ...)
// from the snapshot's data, read once when the policy loads. OPA's default cache is made
// per evaluation and fills itself from the store on every request (a store read, the path
// it is read by and the cache's own entries) for data that never changes while the
// snapshot is in force: its store is never written.
//
// Get returns what the store would: the store's own values, shared the same way. A read
// this cache does not answer (the data root, OPA's system document, a path the data does
// not hold) goes to the store as before; Put keeps nothing.
type dataCache struct {
	root ast.Value // the data document as the store holds it; nil when it holds none
}

var _ topdown.BaseCache = (*dataCache)(nil)

func newDataCache(ctx context.Context, store storage.Store, txn storage.Transaction) (*dataCache, error) {
	v, err := store.Read(ctx, txn, storage.Path{})
	if err != nil {
		if storage.IsNotFound(err) {
			return &dataCache{}, nil
		}
		return nil, err
	}
	root, _ := v.(ast.Value)
	return &dataCache{root: root}, nil
}

var systemKey = ast.InternedTerm(string(ast.SystemDocumentKey))

func (c *dataCache) Get(ref ast.Ref) ast.Value {
	if c.root == nil || len(ref) < 2 || !ref[0].Equal(ast.DefaultRootDocument) || ref[1].Equal(systemKey) {
		return nil
	}
	v, err := c.root.Find(ref[1:])
	if err != nil {
		return nil
	}
	return v
}

func (*dataCache) Put(ast.Ref, ast.Value) {}
