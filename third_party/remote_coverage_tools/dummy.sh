#!/bin/sh
# Stand-in coverage tool: coverage is not collected offline.
exit 0
