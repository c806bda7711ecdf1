"""The book's library, one folder per layer; a module imports only from its own layer or those to its left:

    data -> nn -> objectives -> train -> measure -> trainers -> recipes      (present: plots, widgets, exercises)

`lib.recipes.load(name)` gives any trained model of the book; CONTRIBUTING.md is the map.
"""
