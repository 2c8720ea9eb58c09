module github.com/loomdb/loom/bench/pocketbase/loadgen

go 1.25
