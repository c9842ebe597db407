"""attrs.py spells the semantic conventions' names as literals (no semconv import at start): they are the pinned
package's own."""

from opentelemetry.semconv._incubating.attributes import gen_ai_attributes, vcs_attributes
from opentelemetry.semconv.attributes import error_attributes, exception_attributes, http_attributes

from copilot_otel.model import attrs

CONVENTIONS = (gen_ai_attributes, vcs_attributes, error_attributes, exception_attributes, http_attributes)


def test_every_name_shared_with_a_convention_module_has_its_value():
    shared = [(name, module) for module in CONVENTIONS for name in vars(attrs)
              if name.isupper() and isinstance(getattr(module, name, None), str)]
    assert len(shared) >= 30  # GenAI, VCS, error, exception and HTTP names are all checked
    for name, module in shared:
        assert getattr(attrs, name) == getattr(module, name), name


def test_operation_names_are_the_conventions_values():
    values = gen_ai_attributes.GenAiOperationNameValues
    assert (
        values.INVOKE_AGENT.value, values.CHAT.value, values.EXECUTE_TOOL.value) == (attrs.OP_INVOKE_AGENT,
                                                                                     attrs.OP_CHAT,
                                                                                     attrs.OP_EXECUTE_TOOL)


def test_attrs_imports_no_semconv():
    import subprocess
    import sys
    code = "import sys, copilot_otel.model.attrs; print(any(m.startswith('opentelemetry') for m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"


def test_one_namespace_for_everything_custom():
    """Every dotted key attrs.py names is a convention's, or under github.copilot (the CLI's own prefix, which
    holds copilot-otel's keys too): nothing custom inside gen_ai.*, nothing under a second prefix."""
    from opentelemetry.semconv._incubating.attributes import process_attributes

    known = {value for module in (*CONVENTIONS, process_attributes) for value in vars(module).values()
             if isinstance(value, str)}
    # Named by open-telemetry/semantic-conventions-genai (v0.1.0: skill operations) after the Python package's
    # release the tests pin; the Copilot CLI's own export uses the same name.
    known |= {"gen_ai.skill.name"}
    keys = {value for name, value in vars(attrs).items() if name.isupper() and isinstance(value, str) and "." in value}
    assert len(keys) >= 60
    assert not [key for key in keys if key not in known and not key.startswith("github.copilot.")]
    assert not [key for key in keys if key.startswith("gen_ai.") and key not in known]
