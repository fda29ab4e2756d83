"""``metax-operator doctor``: why has this node no GPU? (R-DOCTOR, docs/doctor.md)

The pure part of the command, by idea: what it gathers (`facts`), the readiness chain of one node in dependency
order (`chain`), what each link looks at (`checks`), the links and the diagnosis they make (`links`), and the
summary, exit code and ``-o json`` document (`report`). The CLI (`services.cli.doctor`) only lists objects and
prints.
"""
