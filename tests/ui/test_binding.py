"""bind(handler, ctx, ...): the bound handler takes the widget values alone, and Gradio still reads which parameter
gets the gr.Request and how many inputs it takes (inspect.signature, get_type_hints)."""
from __future__ import annotations

import warnings

import gradio as gr
import pytest
from gradio.helpers import special_args
from gradio.utils import check_function_inputs_match

from labeler.ui.binding import bind
from labeler.ui.soft_errors import ui_errors


@ui_errors
def greet(ctx: dict, greeting: str, name: str, request: gr.Request) -> str:
    return f"{ctx['prefix']}{greeting}, {name} (asked by {request.username})"


def test_the_bound_handler_takes_the_remaining_arguments_and_gradio_fills_its_request():
    bound = bind(greet, {"prefix": "> "}, "Hello")
    assert bound("Ann", gr.Request(username="boss")) == "> Hello, Ann (asked by boss)"
    assert bound(name="Bo", request=gr.Request(username="ann")) == "> Hello, Bo (asked by ann)"
    # Gradio fills the request by its annotation into the one input slot after the widget value.
    inputs, *_ = special_args(bound, ["Cy"], request=gr.Request(username="root"))
    assert inputs[0] == "Cy" and inputs[1].username == "root"
    assert bound(*inputs) == "> Hello, Cy (asked by root)"
    # One widget input matches; two do not (the bound parameters are no longer inputs): Gradio warns.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_function_inputs_match(bound, [gr.Textbox()], False)
    with pytest.warns(UserWarning, match="Expected 1 arguments"):
        check_function_inputs_match(bound, [gr.Textbox(), gr.Textbox()], False)
    assert list(bound.__annotations__) == ["name", "request", "return"]


def test_binding_more_arguments_than_the_handler_takes_is_refused():
    with pytest.raises(TypeError, match="cannot bind 5 leading arguments of greet"):
        bind(greet, 1, 2, 3, 4, 5)

    def rest(*values, request: gr.Request):
        return values

    with pytest.raises(TypeError, match="cannot bind 1 leading arguments"):
        bind(rest, 1)
