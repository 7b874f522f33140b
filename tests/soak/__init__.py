"""A fleet soak of pglock under a seeded nemesis, with two checkers (issue 23, docs/soak.md).

One module, one idea: `history` the records every part writes and reads, `overlap` and
`slots` the two checkers, `figures` the report, `fleet`, `server`, `cron`, `nemesis` and
`command` the live soak, `main` the command line (`scripts/soak`).
"""
