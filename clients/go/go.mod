module github.com/idem-dev/idem/clients/go

go 1.19
