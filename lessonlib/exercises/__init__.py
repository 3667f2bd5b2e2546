"""Support code for the exercise notebooks: checkers that name the reader's mistake."""
