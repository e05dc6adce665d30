"""What the inline Python SDK clients of the e2e tests share.

`tests/src/py.rs` (PySdk) puts this directory on PYTHONPATH, so a script says
`from sdk_prelude import out, dump, auth_headers, run`: one JSON object per line on stdout,
SDK models as JSON, the bearer header from TUTTI_TEST_TOKEN (never argv), and `run(main)`,
whose last words on a failure are an `error` line and exit status 1.
"""
import asyncio
import json
import os
import sys


def out(**kw):
    print(json.dumps(kw), flush=True)


def dump(model):
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def auth_headers():
    return {"Authorization": "Bearer " + os.environ["TUTTI_TEST_TOKEN"]}


def run(main):
    try:
        asyncio.run(main())
    except Exception as e:
        out(event="error", error=repr(e))
        sys.exit(1)
