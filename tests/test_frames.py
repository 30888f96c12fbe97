"""Tracebacks folded for people (`trio_durable._base._frames`): runs of
trio-durable's own frames (and its adapters') fold, the user's stay, and
where the user's code raised is said."""

from __future__ import annotations

from trio_durable._base._frames import fold_traceback, folded_text

TRACEBACK = """\
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/trio_durable/_kernel/_turn.py", line 214, in _run_body
    value = await wf.fn(ctx, *args)
            ^^^^^^^^^^^^^^^^^^^^^^^
  File "/home/me/shop/flows.py", line 12, in checkout
    await ctx.step(charge, order)
  File "/venv/lib/python3.11/site-packages/trio_durable/_front/_context.py", line 300, in step
    return await self._step(fn, args)
  File "/venv/lib/python3.11/site-packages/trio_durable_rabbitmq/_amqp.py", line 9, in call
    raise
  File "/home/me/shop/payments.py", line 40, in charge
    raise CardDeclined(order.card)
shop.payments.CardDeclined: card 4242 declined"""


def test_own_frames_fold_and_the_users_stay() -> None:
    folded = fold_traceback(TRACEBACK)
    assert folded.raised_in == "/home/me/shop/payments.py:40 in charge"
    assert [(part.folded, part.frames) for part in folded.parts] == [
        (False, 0),
        (True, 1),
        (False, 0),
        (True, 2),
        (False, 0),
    ]
    header, kernel, checkout, front, charge = folded.parts
    assert header.text == "Traceback (most recent call last):"
    assert kernel.text.count("File ") == 1
    assert "^^^^" in kernel.text
    assert checkout.text.splitlines()[0].endswith("in checkout")
    assert "trio_durable_rabbitmq" in front.text
    assert charge.text.endswith("CardDeclined: card 4242 declined")
    # Nothing is lost: the parts are the traceback, line for line.
    lines = [line for part in folded.parts for line in part.text.splitlines()]
    assert lines == TRACEBACK.splitlines()


def test_a_traceback_of_trio_durable_alone_says_no_user_frame() -> None:
    text = 'Traceback (most recent call last):\n  File "/x/trio_durable/_a.py", line 1, in f\nE: e'
    folded = fold_traceback(text)
    assert folded.raised_in is None
    assert [part.folded for part in folded.parts] == [False, True, False]
    assert fold_traceback("no traceback at all").parts[0].text == "no traceback at all"


def test_folded_text_says_how_many_frames_each_fold_holds() -> None:
    text = folded_text(TRACEBACK)
    assert text.splitlines() == [
        "Traceback (most recent call last):",
        "  [1 trio-durable frame folded]",
        '  File "/home/me/shop/flows.py", line 12, in checkout',
        "    await ctx.step(charge, order)",
        "  [2 trio-durable frames folded]",
        '  File "/home/me/shop/payments.py", line 40, in charge',
        "    raise CardDeclined(order.card)",
        "shop.payments.CardDeclined: card 4242 declined",
    ]
    # Text that is no traceback stays as it is.
    assert folded_text("no traceback at all") == "no traceback at all"
