B
old_colsumJ%²ÀGöxÊGì¡HY…H