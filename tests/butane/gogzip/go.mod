module gogzip

go 1.19
