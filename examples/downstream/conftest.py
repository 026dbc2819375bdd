"""The downstream repo's conftest: nothing is needed beyond installing hfexport (the plugin loads itself).

Choose backends, implementation and known failures per run or here, e.g. in pytest.ini:
    hfexport_backend = dynamo,onnx
    hfexport_xfails = known_failures.toml
"""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))  # so the tests import tiny_model without installing it
