"""Three lines give TinyClassifier every check (export, shapes, unchanged) on every selected backend."""

from pytest_hfexport import ModelCase, parametrize_with_checks

from tiny_model import build, make_inputs


# Known failures go in xfails={"tiny-classifier/executorch/shapes": "why"} (strict: a fix shows up as XPASS),
# or in a file passed with --hfexport-xfails.
@parametrize_with_checks([ModelCase("tiny-classifier", build, make_inputs)])
def test_tiny_classifier(check):
    check()


def test_custom_tolerance(assert_exportable):
    """The lower-level fixture, for a test that wants its own inputs or tolerances."""
    model = build().eval()
    assert_exportable(model, make_inputs(model, 2, 5), make_inputs(model, 3, 8), output_tolerance={"logits": 1e-4})
