#!/bin/bash
# Copied unchanged (below this header) from envoyproxy/ratelimit,
# integration-test/scripts/simple-get.sh at commit f2fb157.
# Copyright the envoyproxy/ratelimit authors. Licensed under the Apache
# License, Version 2.0: see ../LICENSE.  Replayed by
# tests/integration/test_rls_envoyproxy.py (Envoy's routes as descriptors).

# Just happy path
curl -s -f -H "foo: test" -H "baz: shady" http://envoy-proxy:8888/twoheader

if [ $? -ne 0 ]; then
	exit 1
fi
