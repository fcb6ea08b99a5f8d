"""What the tests share and are not tests themselves: `from helpers import support` (the import path, a clock, request
builders), `procs` (real server processes), `store_workers` (store processes racing one confirmation), `legacy_client`,
`old_schemas`, `webdriver`, `shared_servers` (a server process shared by a class or a module), `operator_command`
(`serve.py audit` run in this process); `sandbox_probe/` is the simulated compromise the sandbox tests load."""
