"""The console at the sizes people run it: the footer offers help and quit at 80x24, each dialog's footer shows its own
keys, the config form's Save is in view without scrolling, the help box fits, and the top repeated calls name whose
call each is at 80, 120 and 200 columns."""

from __future__ import annotations

import pytest
from textual.widgets import Button

from console.screens.config import ConfigScreen
from console.screens.help import HelpScreen
from console.screens.override import OverrideScreen
from console.widgets.cells import clip
from console.widgets.footer import KeysFooter
from console.widgets.keys import KeysTable
from tests.test_console_snapshots import CROWDED, RATES, STATES, frame, inject, make_app


def footer_keys(app) -> list[str]:
    """The descriptions of the keys the active screen's footer shows."""
    footer = app.screen.query_one(KeysFooter)
    keys = [key for key in footer.children if hasattr(key, "key_display") and not key.has_class("-command-palette")]
    return [str(getattr(key, "description", "")) for key in keys]


async def opened(pilot, key: str, screen_type: type) -> None:
    await pilot.press(key)
    while not isinstance(pilot.app.screen, screen_type):
        await pilot.pause()
    await pilot.pause()


def inside(inner, outer) -> bool:
    return (
        inner.x >= outer.x
        and inner.y >= outer.y
        and inner.right <= outer.right
        and inner.bottom <= outer.bottom
        and inner.width > 0
        and inner.height > 0
    )


@pytest.mark.parametrize("width", [80, 90])
async def test_a_narrow_footer_keeps_help_and_quit_and_lets_the_last_other_keys_give_way(width):
    app = make_app("dark")
    async with app.run_test(size=(width, 24)) as pilot:
        inject(app, frame(STATES["looping"]), RATES)
        await pilot.pause()
        await pilot.pause()
        shown = footer_keys(app)
        assert "Help" in shown and "Quit" in shown
        assert shown[:2] == ["Interrupt", "Config"]  # the most used keep their place
        footer = app.screen.query_one(KeysFooter)
        assert all(inside(key.region, footer.region) for key in footer.children)  # none drawn past the edge


async def test_a_wide_footer_shows_every_key_of_the_main_screen_in_order():
    app = make_app("dark")
    async with app.run_test(size=(150, 40)) as pilot:
        await pilot.pause()
        assert footer_keys(app) == [
            "Interrupt",
            "Config",
            "Exempt",
            "Override",
            "Pause guard",
            "Filter",
            "Help",
            "Quit",
        ]


async def test_a_resized_footer_fits_its_keys_again():
    app = make_app("dark")
    async with app.run_test(size=(150, 24)) as pilot:
        await pilot.pause()
        assert "Pause guard" in footer_keys(app)
        await pilot.resize_terminal(80, 24)
        for _ in range(5):
            await pilot.pause()
        assert "Pause guard" not in footer_keys(app) and "Quit" in footer_keys(app)


async def test_at_80x24_the_help_box_fits_the_screen_and_its_footer_says_how_to_close_it():
    app = make_app("dark")
    async with app.run_test(size=(80, 24)) as pilot:
        await opened(pilot, "question_mark", HelpScreen)
        box = app.screen.query_one("VerticalScroll")
        assert inside(box.region, app.screen.region)
        assert footer_keys(app) == ["Close"]


async def test_the_config_form_shows_its_own_keys_and_its_save_button_without_scrolling_at_80x24():
    app = make_app("dark")
    async with app.run_test(size=(80, 24)) as pilot:
        inject(app, frame(STATES["looping"]), RATES)
        await opened(pilot, "e", ConfigScreen)
        assert footer_keys(app) == ["Cancel", "Save"]  # not the main screen's Interrupt, Config…
        fields = app.screen.query_one("#fields")
        assert fields.max_scroll_y > 0  # ~30 fields: they scroll
        save = app.screen.query_one("#save", Button)
        assert inside(save.region, app.screen.region)  # Save is on screen with the fields at the top
        fields.scroll_end(animate=False)
        await pilot.pause()
        assert inside(save.region, app.screen.region)  # and at the bottom


async def test_a_read_only_config_form_greys_its_save_key():
    app = make_app("dark")
    app.readonly = app.main.readonly = True
    async with app.run_test(size=(120, 40)) as pilot:
        inject(app, frame(STATES["looping"]), RATES)
        app.push_screen(ConfigScreen({}, None, readonly=True))
        while not isinstance(app.screen, ConfigScreen):
            await pilot.pause()
        await pilot.pause()
        [save] = [k for k in app.screen.query_one(KeysFooter).children if getattr(k, "description", "") == "Save"]
        assert save.has_class("-disabled")


async def test_the_override_form_shows_its_own_keys():
    app = make_app("dark")
    async with app.run_test(size=(80, 24)) as pilot:
        inject(app, frame(STATES["looping"]), RATES)
        await pilot.pause()
        await opened(pilot, "o", OverrideScreen)
        assert footer_keys(app) == ["Cancel", "Apply"]


@pytest.mark.parametrize("width", [80, 120, 200])
async def test_the_top_repeated_calls_name_whose_call_it_is_at_any_width(width):
    app = make_app("dark")
    async with app.run_test(size=(width, 50)) as pilot:
        inject(app, frame(CROWDED), RATES)
        await pilot.pause()
        await pilot.pause()
        table = app.query_one(KeysTable)
        app.main.flush()
        await pilot.pause()
        columns = {str(column.key.value): column for column in table.columns.values()}
        agent = columns["agent"]
        used = sum(column.get_render_width(table) for column in columns.values())
        assert agent.width >= 10  # a readable id: both of its ends, not two characters
        assert used <= table.size.width  # every column in view, none past the edge
        assert table.size.width - used <= 4  # and no wide blank beside them (the scrollbar's two cells at most)
        if width >= 200:
            assert agent.width >= 24  # room is given to the id, not left blank
        shown = {str(row[list(columns).index("agent")]) for row in map(table.get_row_at, range(table.row_count))}
        assert shown == {clip(key.agent, agent.width) for key in app.state.top_keys}  # each row names its agent
