module github.com/idem-dev/idem/examples/articles-go

go 1.19

require github.com/idem-dev/idem/clients/go v0.0.0

// The client from this repository (the module is not published): nothing is downloaded.
replace github.com/idem-dev/idem/clients/go => ../../clients/go
