"""What the pieces share: the product's install, the chart's arguments, the measurements, the fake and the
real API servers they run on. Support modules import each other and tests/, never a piece."""
